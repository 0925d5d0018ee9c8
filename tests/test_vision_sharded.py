"""Issue 15, core-ATen coverage: a small CNN sharded the ways vision models are
(tests/cases/ops/sharded_vision.py): data parallel, output- and input-channel shards of a conv,
batch norm over a batch shard with and without synced statistics, spatial shards without halos.
Every label is checked by running the program on a real gloo group against the single-device
program; a correct program must be verified, a buggy one a violation at the op applied to the
wrong shards."""
import importlib
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import gloo_outputs, variant_agrees  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402

CASES = os.path.join(os.path.dirname(__file__), "cases", "ops")
sys.path.insert(0, CASES)
vision = importlib.import_module("sharded_vision")
WORLD = 2
# make test runs these (one gloo run for all); the other variants are sweeps (make test-all)
FAST = {"data_parallel", "out_channels", "batch_norm_local_stats", "batch_norm_synced"}


def _verdict_matches(case, correct: bool, name: str, bug_ops) -> None:
    """The gloo label agrees with the case's, and the verdict with the label: verified when
    correct (or, for a form no lemma relates yet, unknown naming an op), else a violation whose
    first finding is at one of `bug_ops`."""
    assert correct != case.meta["buggy"], f"label of {name} contradicted by gloo execution"
    report = verify_prepared(prepare(case, WORLD))
    if correct and name in vision.UNKNOWN_OK:
        assert report.status in ("verified", "unknown"), (report.status, report.reason)
        assert report.status == "verified" or "aten." in report.reason, report.reason
    elif correct:
        assert report.status == "verified", report.reason
    else:
        assert report.status == "violation", (report.status, report.reason)
        assert report.findings[0].op in bug_ops, report.findings[0]


@pytest.fixture(scope="module")
def executed():
    return gloo_outputs(CASES, "sharded_vision", "build", list(vision.VARIANTS), WORLD)


@pytest.mark.parametrize("variant", [v if v in FAST else pytest.param(v, marks=pytest.mark.sweep)
                                     for v in vision.VARIANTS])
def test_vision_pair_verdict_matches_execution(executed, variant):
    case = vision.build(WORLD, variant)
    correct = variant_agrees(case, [r[variant] for r in executed], case.expect["out"], atol=1e-4)
    _verdict_matches(case, correct, variant, vision.BUG_OPS.get(variant))


@pytest.mark.sweep  # two training-step captures (~30 s each on a loaded machine): make test-all
@pytest.mark.parametrize("name", ["cnn_dp_train", "cnn_dp_train_bug"])
def test_cnn_data_parallel_training_step(name):
    """DP training of a CNN: convolution, max pool, group norm and adaptive pool backwards give
    partial sums over the batch shard that the gradient all_reduce completes (verified); one
    gradient left un-reduced is a violation at the convolution_backward that made it. Labels:
    the gradients of each gloo rank against the single device's."""
    from gloo import training_gradients
    path = os.path.join(CASES, f"{name}.py")
    single, ranks = training_gradients(path, WORLD)
    correct = all(isinstance(r, dict) and all(torch.allclose(r[n], g, atol=1e-5) for n, g in single.items())
                  for r in ranks)
    _verdict_matches(importlib.import_module(name).case(WORLD), correct, name, {"aten.convolution_backward"})
