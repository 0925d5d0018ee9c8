"""Grouped-query attention over heads of one fused QKV projection (torchtitan's ``wqkv``
layout), tests/cases/fused_qkv_gqa.py: the single device's attention operands are
materialized selections of the fused projection's heads, and a rank's are a common
selection of those (ops/sdpa_reuse.py), so the colwise program is proved; the twin whose
keys are rotated by a group is a violation where the keys are rebuilt. Labels run on a real
gloo group against the single device."""
import functools
import os

import numpy as np
import pytest
import torch

from gloo import load_case_module, run_fn_on_gloo
from shardproof.api import verify_case

CASE = load_case_module(os.path.join(os.path.dirname(__file__), "cases", "fused_qkv_gqa.py"))


def _both(rank: int, world: int) -> dict:
    out = {}
    for bug in (False, True):
        case = CASE.case(world, bug=bug)
        with torch.no_grad():
            out[bug] = case.distributed(rank, world)(**case.dist_inputs(rank, world, case.inputs))["out"].numpy()
    return out


@functools.lru_cache(maxsize=None)
def gloo_labels(world: int) -> dict:
    """bug -> whether the ranks' outputs, concatenated on the heads dim, are the single device's."""
    ranks = run_fn_on_gloo(_both, world)
    case = CASE.case(world)
    with torch.no_grad():
        single = case.single(**case.inputs)["out"].numpy()
    return {bug: np.allclose(np.concatenate([r[bug] for r in ranks], axis=2), single, atol=1e-5)
            for bug in (False, True)}


def test_pair_is_labelled_on_gloo():
    assert gloo_labels(2)[False] and not gloo_labels(2)[True], gloo_labels(2)


@pytest.mark.parametrize("world", (2, pytest.param(4, marks=pytest.mark.sweep)))
def test_fused_qkv_gqa_verifies(world):
    report = verify_case(CASE.case(world))
    assert report.status == "verified", report.reason
    assert report.strength == "proof"
    assert [(o.name, o.holds) for o in report.outputs] == [("out", "Shard(2)")]


def test_rotated_keys_are_a_violation_where_the_keys_are_rebuilt():
    bad = verify_case(CASE.case(2, bug=True))
    assert bad.status == "violation", bad.reason
    found = bad.findings[0]
    assert (found.op, found.kind) == ("aten.cat", "wrong-operand"), (found.node, found.op, found.kind)
