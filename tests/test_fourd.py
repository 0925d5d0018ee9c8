"""The 4-D step's rules at sizes ``make test`` affords (issue 18): a pp2 x cp2 Llama step
(pipeline P2P of flattened sequence shards, Ulysses all_to_alls over cp) verified, with its
stage-1 bug (Ulysses' inverse all_to_all concatenated along the wrong dim on one stage) a
violation at its stage, microbatch and ranks (tests/test_training.py checks the node against
the file's meta; here its stage and ranks); grouped-query attention under Ulysses (forward and
training step, cp 2 and 4) verified, its bug twins violations at their nodes. The 16-rank
dp2 x pp2 x tp2 x cp2 step is tests/test_pipeline_mesh.py's (sweep).

Every program pair is labelled on a real gloo group (sweep: each label spawns the ranks)."""
import importlib
import os

import pytest

from conftest import ROOT, ZOO

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import max_differences, run_case_file, tp_gradients_agree, training_gradients  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402
from test_pipeline_mesh import _check_groups  # noqa: E402

TRAIN, CP = os.path.join(ZOO, "train"), os.path.join(ZOO, "cp")
TOL = 1e-5  # float32 rounding of another summation order
_REPORTS: dict = {}


def _report(name: str, world: int, keep: bool = False):
    if (name, world) not in _REPORTS:
        prepared = prepare(importlib.import_module(name).case(world), world)
        _REPORTS[name, world] = (prepared, verify_prepared(prepared, fixes=False))
    return _REPORTS[name, world] if keep else _REPORTS[name, world][1]


def test_pp2_cp2_step_verified():
    """Loss and every gradient equal the whole model's step; the P2P between the stages'
    ranks of the same cp coordinate, the all_to_alls and sums over cp on their groups."""
    prepared, report = _report("pipeline_llama_pp_cp", 4, keep=True)
    assert report.status == "verified", report.reason
    holds = {o.name: o.holds for o in report.outputs}
    assert holds["loss"] == "Replicate()" and holds["grad:layers.1.wq.weight"] == "Replicate()", holds
    _check_groups(prepared, report, pp=2, dp=1, tp=1, cp=2, microbatches=2)


@pytest.mark.sweep
@pytest.mark.parametrize("world", [4, 16])
def test_stage1_bug_located(world):
    """The wrong concatenation on stage 1 only (pp2 x cp2, and the 4-D dp2 x pp2 x tp2 x cp2
    step): a violation on every rank of stage 1 (never stage 0), in the first microbatch, at
    the concatenation."""
    meta = importlib.import_module("pipeline_cp_inverse_wrong_dim_stage1").case(world).meta
    report = _report("pipeline_cp_inverse_wrong_dim_stage1", world)
    assert report.status == "violation", report.reason
    f = report.findings[0]
    assert (sorted(f.rank), f.stage, f.microbatch, f.node, f.op, f.kind) == (
        meta["bug_ranks"], 1, 0, meta["bug_node"], meta["bug_op"], meta["bug"]), f


@pytest.mark.parametrize("world", [pytest.param(2, marks=pytest.mark.sweep), 4])
def test_ulysses_gqa_forward_verified(world):
    """cp 2: KV heads split with their query heads; cp 4: fewer KV heads than ranks, each
    repeated before the split."""
    report = _report("cp_ulysses_gqa", world)
    assert report.status == "verified", report.reason


@pytest.mark.sweep
@pytest.mark.parametrize("name,world", [("cp_ulysses_gqa_kv_split_strided", 2), ("cp_ulysses_gqa_kv_tiled", 4)])
def test_ulysses_gqa_bug_located(name, world):
    """The strided split at the unflatten of the KV heads (every rank); the tiled repeat at the
    scores of the two ranks whose query heads meet another group's KV head. Node, op, class,
    ranks and source line as the file's meta states."""
    meta = importlib.import_module(name).case(world).meta
    report = _report(name, world)
    assert report.status == "violation", report.reason
    f = report.findings[0]
    want = list(range(world)) if meta["bug_ranks"] == "all" else meta["bug_ranks"]
    assert (f.node, f.op, f.kind, sorted(f.rank)) == (meta["bug_node"], meta["bug_op"], meta["bug"], want), f
    path, line = f.source.split(" in ")[0].rsplit(":", 1)
    with open(path if os.path.isabs(path) else os.path.join(ROOT, path)) as src:
        assert meta["bug_code"] in src.read().splitlines()[int(line) - 1], f.source


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.sweep)])
def test_ulysses_gqa_training_step_verified(world):
    report = _report("ulysses_gqa_train", world)
    assert report.status == "verified", report.reason
    holds = {o.name: o.holds for o in report.outputs}
    assert holds["grad:layers.0.wk.weight"] == "Replicate()", holds


@pytest.mark.sweep
def test_ulysses_gqa_training_with_widened_kv_verified():
    """Fewer KV heads than ranks (2 at cp 4, each repeated before the all_to_all): every
    rank's KV gradient is a partial sum over its own query heads, carried through RoPE's
    backward and the all_to_all before the repeat's backward adds the replicas -- verified
    (algebra/sum_pieces.py), every gradient replicated as the whole model's. Correct on gloo
    (below); the bug twins are violations (tests/test_cp_gqa_few_kv.py)."""
    report = _report("ulysses_gqa_train_widened", 4)
    assert report.status == "verified", report.reason
    holds = {o.name: o.holds for o in report.outputs}
    assert holds["grad:layers.0.wk.weight"] == holds["grad:layers.1.wv.weight"] == "Replicate()", holds


# ---------------------------------------------------------------- labels: real gloo groups

@pytest.mark.sweep
@pytest.mark.parametrize("name,world", [("cp_ulysses_gqa", 2), ("cp_ulysses_gqa", 4)])
def test_gqa_forward_correct_on_gloo(name, world):
    assert max(max_differences(run_case_file(os.path.join(CP, name + ".py"), world)).values()) <= TOL


@pytest.mark.sweep
@pytest.mark.parametrize("name,world", [("cp_ulysses_gqa_kv_split_strided", 2), ("cp_ulysses_gqa_kv_tiled", 4)])
def test_gqa_forward_bugs_wrong_on_gloo(name, world):
    assert max(max_differences(run_case_file(os.path.join(CP, "bugs", name + ".py"), world)).values()) > 1e-3


@pytest.mark.sweep
@pytest.mark.parametrize("name,world,cp", [("pipeline_llama_pp_cp", 4, 2), ("ulysses_gqa_train", 2, 2),
                                           ("ulysses_gqa_train", 4, 4), ("ulysses_gqa_train_widened", 4, 4)])
def test_steps_correct_on_gloo(name, world, cp, monkeypatch):
    monkeypatch.setenv("SHARDPROOF_GLOO_TIMEOUT_S", "300")
    assert tp_gradients_agree(os.path.join(TRAIN, name + ".py"), world, tp=1, cp=cp)


@pytest.mark.sweep
@pytest.mark.parametrize("world", [4, 16])
def test_stage1_bug_wrong_on_gloo(world):
    single, ranks = training_gradients(os.path.join(TRAIN, "bugs", "pipeline_cp_inverse_wrong_dim_stage1.py"), world,
                                       timeout=600)
    assert all(isinstance(r, dict) for r in ranks), ranks
    assert not all(torch.allclose(r[n].double(), g.detach().double(), rtol=1e-5, atol=1e-6)
                   for r in ranks for n, g in single.items())
