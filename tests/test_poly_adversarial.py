"""Trying to make the polynomial normal form (algebra/poly.py) lie: a hand-written LayerNorm
whose mean and variance divide by the rank's local width has every term of the right shape and
only a coefficient wrong -- a violation; the centered variance from an all-reduced sum of
squared deviations, divided by ``sqrt`` instead of multiplied by ``rsqrt``, is correct and must
still be proved. Labels: each program run on a real gloo group against the single device."""
import functools
import os
import sys

import numpy as np
import pytest
import torch

from gloo import run_fn_on_gloo
from shardproof.api import verify_case

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cases", "same_math"))
import layernorm_adversarial as adv  # noqa: E402

VARIANTS = ("local_n", "centered")


def _ranks(rank, world):
    out = {}
    for v in VARIANTS:
        case = adv.case(world, v)
        with torch.no_grad():
            out[v] = case.distributed(rank, world)(**case.dist_inputs(rank, world, case.inputs))["out"].numpy()
    return out


@functools.lru_cache(maxsize=None)
def _labels(world):
    ranks = run_fn_on_gloo(_ranks, world)
    labels = {}
    for v in VARIANTS:
        case = adv.case(world, v)
        whole = case.single(**case.inputs)["out"].detach().numpy()
        labels[v] = np.allclose(np.concatenate([r[v] for r in ranks], axis=-1), whole, atol=1e-5)
    return labels


@pytest.mark.parametrize("world", [2, 4])
def test_local_width_normalizer_is_a_violation(world):
    assert not _labels(world)["local_n"]
    report = verify_case(adv.case(world, "local_n"))
    assert report.status == "violation", report.reason
    assert report.findings[0].op == "aten.sum"


@pytest.mark.parametrize("world", [2, 4])
def test_centered_variance_divided_by_sqrt_is_proved(world):
    assert _labels(world)["centered"]
    report = verify_case(adv.case(world, "centered"))
    assert report.status == "verified" and report.strength == "proof", report.reason
