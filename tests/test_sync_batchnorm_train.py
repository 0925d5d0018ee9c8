"""Synced BatchNorm's training step (data parallel, tests/cases/same_math/batchnorm_synced.py):
the per-channel statistics all-reduced by hand from each rank's sum and sum of squares, the
loss and the weight and bias gradients all-reduced, against F.batch_norm's step over the whole
batch (its backward decomposed over the saved mean and inverse standard deviation, which the
polynomial normal form expands by definition). Verified; the rank's own statistics, or the
n - 1 divisor, a violation. Labelled on a real gloo group."""
import os

import numpy as np
import pytest
import torch

from gloo import load_case_module, run_fn_on_gloo
from shardproof.api import verify_case

CASE = os.path.join(os.path.dirname(__file__), "cases", "same_math", "batchnorm_synced.py")
TWINS = ("local", "unbiased")


def _case(world=2, bug=False, wrong="local"):
    return load_case_module(CASE).train_case(world, bug, wrong)


@pytest.mark.parametrize("world", (2, 4))
def test_synced_batch_norm_step_verifies(world):
    report = verify_case(_case(world))
    assert (report.status, report.strength) == ("verified", "proof"), report.reason
    assert {o.name: o.holds for o in report.outputs} == {"loss": "Replicate()", "grad:weight": "Replicate()",
                                                         "grad:bias": "Replicate()"}


@pytest.mark.parametrize("wrong", TWINS)
def test_buggy_twin_is_a_violation(wrong):
    report = verify_case(_case(2, True, wrong))
    assert report.status == "violation", report.reason
    held = {o.name: o.holds for o in report.outputs}
    assert held["grad:weight"] is None and held["loss"] is None, held  # the normalized values differ


def _steps(rank, world):
    out = []
    for bug, wrong in ((False, "local"),) + tuple((True, w) for w in TWINS):
        case = _case(world, bug, wrong)
        model = case.distributed(rank, world)
        step = model.train_step(case.dist_inputs(rank, world, case.inputs), {}, case.train)
        out.append((float(step["loss"]), {n: g.numpy() for n, g in step["grads"].items()}))
    return out


@pytest.mark.slow
def test_pair_is_labelled_on_gloo():
    """On gloo the synced step's loss and gradients are the single device's; each twin's loss
    and weight gradient are not."""
    case = _case()
    params = dict(case.single.named_parameters())
    loss = case.train.loss(case.single(case.inputs["x"]), case.inputs)
    grads = dict(zip(params, (g.numpy() for g in torch.autograd.grad(loss, list(params.values())))))
    loss = float(loss.detach())
    for rank in run_fn_on_gloo(_steps, 2):
        (good_loss, good), *twins = rank
        assert abs(good_loss - loss) < 1e-3 and all(np.allclose(good[n], grads[n], atol=1e-4) for n in grads)
        for twin_loss, twin in twins:
            assert abs(twin_loss - loss) > 1e-2 and not np.allclose(twin["weight"], grads["weight"], atol=1e-2)
