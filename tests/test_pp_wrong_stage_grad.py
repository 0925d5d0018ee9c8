"""An activation gradient sent to the wrong stage rank (issue 18): a hand-written 1F1B loop on a
pp2 x dp2 mesh whose backward P2P peers cross the data-parallel replicas (forward peers right,
both ends of the backward exchange agreeing, so nothing hangs). The correct twin verifies; the
bug is a violation at stage 0's first backward op, microbatch 0, on exactly stage 0's ranks,
with the received gradient named as the other replica's piece. Both labelled on a real gloo
group: the twin's gradients equal the whole model's, the bug's do not."""
import importlib
import os

import pytest

from conftest import ZOO

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import prepare, verify_prepared  # noqa: E402
from test_pipeline import _gloo_label  # noqa: E402

TRAIN = os.path.join(ZOO, "train")
BUG, TWIN = "pipeline_grad_to_wrong_stage_rank", "pipeline_mlp_1f1b_pp2_dp2"


def _verify(name: str):
    return verify_prepared(prepare(importlib.import_module(name).case(4), 4), fixes=False)


def test_correct_twin_verified():
    report = _verify(TWIN)
    assert report.status == "verified", (report.reason, report.findings[:1])
    holds = {o.name: o.holds for o in report.outputs}
    assert holds.pop("loss") == "Replicate()" and set(holds.values()) == {"Replicate()"}, holds
    assert report.temporal["findings"] == 0, report.temporal


def test_gradient_to_wrong_stage_rank_located():
    """Node, op, class, stage, microbatch and ranks as the bug file's meta states; the finding
    names the received operand as the piece of rank 3 (the other replica's stage 1) on rank 0."""
    meta = importlib.import_module(BUG).case(4).meta
    report = _verify(BUG)
    assert report.status == "violation", report.reason
    f = report.findings[0]
    assert (f.node, f.op, f.kind, sorted(f.rank), f.stage, f.microbatch) == (
        meta["bug_node"], meta["bug_op"], meta["bug"], meta["bug_ranks"], meta["bug_stage"], meta["bug_microbatch"]), f
    assert "same piece as on rank 3" in f.hint, f.hint
    assert f.stage == 0 and "pipeline stage 0, microbatch 0" in f.message, f.message
    assert report.temporal["findings"] == 0, report.temporal  # it does not hang: a value bug, not a P2P one


@pytest.mark.sweep
@pytest.mark.parametrize("path,label", [(os.path.join(TRAIN, TWIN + ".py"), "correct"),
                                        (os.path.join(TRAIN, "bugs", BUG + ".py"), "wrong")])
def test_gloo_labels(path, label):
    assert _gloo_label(path, 4) == label
