"""torchtitan's vocab-parallel embedding (ids clamped into the rank's block, the lookup
multiplied by the in-block mask), tests/cases/vocab/clamp_mask.py: the correct program is
proved at world sizes 2-4 (blocks of ceil(V / world) rows, the last one shorter), and its
off-by-one twin (the block's upper bound one too far) is a violation found at the mask.
Both labels are facts about PyTorch: the pair runs on a real gloo group against the single
device (one group runs both programs)."""
import functools
import os

import numpy as np
import pytest
import torch

from gloo import load_case_module, run_fn_on_gloo
from shardproof.api import verify_case

CASE = load_case_module(os.path.join(os.path.dirname(__file__), "cases", "vocab", "clamp_mask.py"))
MASK_CHAIN = {"aten.lt", "aten.bitwise_and", "aten.unsqueeze", "aten._to_copy", "aten.mul"}


def _both_twins(rank: int, world: int) -> dict:
    out = {}
    for bug in (False, True):
        case = CASE.case(world, bug=bug)
        data = case.dist_inputs(rank, world, case.inputs)
        with torch.no_grad():
            out[bug] = case.distributed(rank, world)(**data)["out"].numpy()
    return out


@functools.lru_cache(maxsize=None)
def gloo_labels(world: int) -> dict:
    """bug -> whether every rank holds the single device's lookup on a gloo group."""
    ranks = run_fn_on_gloo(_both_twins, world)
    case = CASE.case(world)
    single = case.single(**case.inputs)["out"].numpy()
    return {bug: all(np.allclose(r[bug], single, atol=0) for r in ranks) for bug in (False, True)}


@pytest.mark.parametrize("world", (2, pytest.param(4, marks=pytest.mark.sweep)))  # ~0.2 s a group
def test_pair_is_labelled_on_gloo(world):
    assert gloo_labels(world)[False], "torchtitan's form must compute the single-device lookup on gloo"
    assert not gloo_labels(world)[True], "the off-by-one twin must differ from the single device on gloo"


@pytest.mark.parametrize("world", (2, pytest.param(3, marks=pytest.mark.sweep), pytest.param(4, marks=pytest.mark.sweep)))
def test_clamp_form_verifies_and_its_twin_is_found_at_the_mask(world):
    report = verify_case(CASE.case(world))
    assert report.status == "verified", report.reason
    assert report.strength == "proof"
    bad = verify_case(CASE.case(world, bug=True))
    assert bad.status == "violation", bad.reason
    found = bad.findings[0]
    assert found.op in MASK_CHAIN, (found.op, found.node)
    assert 0 in found.rank, found.rank  # rank 0's block takes id `chunk` as its own
