"""Stages split by ``torch.distributed.pipelining.pipeline()`` (issue 18): the whole MLP
stack exported and cut at ``SplitPoint.BEGINNING`` (zoo/train/pp_traced.py), each rank's
stage built by ``pipe.build_stage`` and run by PyTorch's schedules with the default loss
scaling, verified against the whole model's step; the split marker (``pippy._pipe_split``,
left in the single-device model's forward) has no value; the legacy warm-up (zeros
exchanged between neighbours) carries nothing the step uses. A mean loss with the schedule
told not to scale is a violation at its stage and microbatch. Labelled on real gloo."""
import importlib

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import prepare, verify_prepared  # noqa: E402
from test_pipelining import _gloo_label  # noqa: E402

TRACED = importlib.import_module("pp_traced")


class TracedUnscaled(TRACED.TracedPipeline):
    """BUG: a mean loss per microbatch with the schedule told not to scale the gradients."""
    scale_grads = False

    def loss_fn(self, inputs):
        return importlib.import_module("pp_schedules").mse

    def total_loss(self, losses):
        return sum(losses) / len(losses)


def _verify(schedule="1f1b", model=TRACED.TracedPipeline):
    prepared = prepare(TRACED.case(2, schedule, model=model), 2)
    return prepared, verify_prepared(prepared, fixes=False)


@pytest.fixture(scope="module")
def traced_1f1b():
    return _verify()


def test_traced_split_1f1b_verified(traced_1f1b):
    """Loss and all 8 gradients equal the whole model's; each microbatch's P2P marked with
    its stage and microbatch; the only unmarked P2P ops are the warm-up exchange (one
    element each way); the single-device program carries the split marker."""
    prepared, report = traced_1f1b
    assert report.status == "verified", (report.reason, report.findings[:1])
    checked = {o.name: o.holds for o in report.outputs}
    assert checked.pop("loss") == "Replicate()" and len(checked) == 8 and set(checked.values()) == {"Replicate()"}
    assert report.temporal["checked"] and report.temporal["findings"] == 0, report.temporal
    assert any(n.op == "pippy._pipe_split" for n in prepared.seq.nodes)
    for rank, graph in enumerate(prepared.dist.graphs):
        issues = graph.events.p2p()
        marked = [e for e in issues if e.stage is not None]
        assert {(e.stage, e.microbatch) for e in marked} == {(rank, m) for m in range(4)}
        assert all(b.stop - b.start == 4 for e in issues if e.stage is None for b in e.reads + e.writes), issues[:2]


@pytest.mark.sweep
def test_traced_split_gpipe_verified():
    _, report = _verify("gpipe")
    assert report.status == "verified", (report.reason, report.findings[:1])


def test_traced_split_unscaled_mean_is_a_violation_at_a_stage():
    """Every gradient 4x too large: found on the last stage's rank, its first microbatch."""
    _, report = _verify(model=TracedUnscaled)
    assert report.status == "violation", report.reason
    f = report.findings[0]
    assert f.rank == [1] and (f.stage, f.microbatch) == (1, 0), f
    assert "pipeline stage 1, microbatch 0" in f.message, f.message


@pytest.mark.parametrize("model,label", [(TRACED.TracedPipeline, "correct"), (TracedUnscaled, "wrong")],
                         ids=["traced", "traced-unscaled"])
def test_gloo_labels(model, label):
    assert _gloo_label(lambda: TRACED.case(2, "1f1b", model=model), 2) == label
