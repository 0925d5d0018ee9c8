"""Issue 15, "the same math written another way": each form verifies (a proof), and its buggy
twin is a violation at the node where it goes wrong. Every pair is labelled on a real gloo
group (one process per rank) against the single-device program, so the labels are facts
about PyTorch. Case files: tests/cases/same_math/."""
import functools
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gloo import load_case_module, run_fn_on_gloo, variant_agrees
from shardproof.api import verify_case

HERE = os.path.join(os.path.dirname(__file__), "cases", "same_math")

# form -> (case file, extra config, where the buggy twin must be found: ops, node names, kind or None)
FORMS = {
    "bias_reassoc": ("bias_reassoc.py", {}, ({"aten.add"}, {"add"}, "replicated-counted-per-rank")),
    "demorgan_mask": ("demorgan_mask.py", {}, ({"aten.embedding"}, {"embedding"}, None)),
    "layernorm_by_hand": ("layernorm_by_hand.py", {}, ({"aten.sum", "aten.sub", "aten.rsqrt"}, None, None)),
    "layernorm_flipped_var": ("layernorm_by_hand.py", {"wrong": "flipped"},
                              ({"aten.sum", "aten.sub", "aten.rsqrt"}, None, None)),
    "layernorm_unbiased_var": ("layernorm_by_hand.py", {"wrong": "unbiased"},
                               ({"aten.sum", "aten.sub", "aten.div", "aten.rsqrt"}, None, None)),
    "batchnorm_synced": ("batchnorm_synced.py", {}, ({"aten.sum", "aten.sub", "aten.div", "aten.rsqrt"}, None, None)),
    "batchnorm_unbiased_var": ("batchnorm_synced.py", {"wrong": "unbiased"},
                               ({"aten.sum", "aten.sub", "aten.div", "aten.rsqrt"}, None, None)),
    "rope_positions": ("rope_positions.py", {}, ({"aten.mul"}, {"mul_4"}, None)),
    "sdpa_scale": ("sdpa_scale.py", {}, ({"aten._scaled_dot_product_flash_attention_for_cpu"}, None, None)),
    "beam_batch": ("beam_repeat.py", {"dim": "batch"}, ({"aten.repeat", "aten.mul", "aten.tanh"}, None,
                                                        "wrong-shard-offset")),
    "beam_hidden": ("beam_repeat.py", {"dim": "hidden"}, ({"aten.repeat", "aten.mul", "aten.tanh"}, None,
                                                          "wrong-shard-offset")),
}
NOT_YET: dict = {}  # form -> why it is not proved yet (an xfail(strict=True))


def _case(form: str, world: int, bug: bool):
    path, config, _ = FORMS[form]
    return load_case_module(os.path.join(HERE, path)).case(world, bug=bug, **config)


def _all_ranks(rank: int, world: int) -> dict:
    """Every form and twin's distributed output on this rank (run inside a gloo group)."""
    out = {}
    for form in FORMS:
        for bug in (False, True):
            case = _case(form, world, bug)
            data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else dict(case.inputs)
            with torch.no_grad():
                out[form, bug] = case.distributed(rank, world)(**{k: v.clone() for k, v in data.items()})["out"].numpy()
    return out


@functools.lru_cache(maxsize=None)
def gloo_labels(world: int) -> dict:
    """(form, bug) -> whether the ranks' outputs equal the single device's on a gloo group
    of `world` processes (one group runs every case)."""
    labels = {}
    ranks = run_fn_on_gloo(_all_ranks, world)
    for form, bug in ranks[0]:
        case = _case(form, world, bug)
        outs = [torch.from_numpy(np.asarray(r[form, bug])) for r in ranks]
        with torch.no_grad():
            single = case.single(**case.inputs)["out"]
        whole = SimpleNamespace(single=lambda single=single: single, inputs={})
        labels[form, bug] = variant_agrees(whole, outs, case.expect["out"], atol=1e-5)
    return labels


@pytest.mark.slow
@pytest.mark.parametrize("world", (2, pytest.param(4, marks=pytest.mark.sweep)))
@pytest.mark.parametrize("form", sorted(FORMS))
def test_pair_is_labelled_on_gloo(form, world):
    assert gloo_labels(world)[form, False], "the correct form must compute the single-device output on gloo"
    assert not gloo_labels(world)[form, True], "the buggy twin must differ from the single device on gloo"


def _check(form: str, world: int) -> None:
    report = verify_case(_case(form, world, bug=False))
    assert report.status == "verified", report.reason
    assert report.strength == "proof"
    bad = verify_case(_case(form, world, bug=True))
    assert bad.status == "violation", bad.reason
    ops, nodes, kind = FORMS[form][2]
    found = bad.findings[0]
    assert found.op in ops, (found.op, found.node)
    assert nodes is None or found.node in nodes, found.node
    assert kind is None or found.kind == kind, found.kind


def _marks(form: str) -> list:
    return [pytest.mark.xfail(strict=True, reason=NOT_YET[form])] if form in NOT_YET else []


@pytest.mark.parametrize("form", [pytest.param(f, marks=_marks(f)) for f in sorted(FORMS)])
def test_form_verifies_and_its_twin_is_found(form):
    _check(form, 2)


@pytest.mark.sweep
@pytest.mark.parametrize("form", [pytest.param(f, marks=_marks(f)) for f in sorted(FORMS)])
def test_form_at_world_4(form):
    _check(form, 4)
