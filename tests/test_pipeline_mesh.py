"""Multi-axis pipeline steps and the pipeline bug catalogue (issue 18): a Llama step at
dp2 x pp2 x tp2 (8 ranks, 4 microbatches) under 1F1B and under interleaved 1F1B, and the 4-D
dp2 x pp2 x tp2 x cp2 step (16 ranks, Ulysses context parallelism) verified against the whole
model's step, with the process groups of each axis where they belong; the pipeline bugs from
real trackers (zoo/train/bugs) labelled by running them and their correct twin
(pipeline_mlp_1f1b, pp2) on a real gloo group. Their location (node, op, rank, stage,
microbatch) is checked by tests/test_training.py (test_training_bug_found, against each file's
meta)."""
import importlib
import os

import pytest

from conftest import ZOO

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import tp_gradients_agree, training_gradients  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402
from shardproof.ir.events import ISSUE  # noqa: E402

TRAIN = os.path.join(ZOO, "train")
TRACKER_BUGS = ("torchtitan_2972_pp_loss_not_normalized", "areal_1273_loss_divided_by_microbatches",
                "automodel_3530_pp_grads_reset_between_microbatches")


def _verified(name: str, world: int):
    case = importlib.import_module(name).case(world)
    prepared = prepare(case, world)
    return prepared, verify_prepared(prepared, fixes=False)


@pytest.fixture(scope="module")
def mesh3d():
    """dp2 x pp2 x tp2, captured and verified once (~30 s wall on the loaded 2-core machine)."""
    return _verified("pipeline_llama_3d", 8)


def _check_groups(prepared, report, pp: int, dp: int, tp: int, cp: int, microbatches: int):
    """Rank = ((stage * dp + dp_rank) * tp + tp_rank) * cp + cp_rank (zoo/train/mini_mesh.py): each
    rank's stage and microbatches, its P2P peer, and the groups of its collectives."""
    assert report.temporal["checked"] and report.temporal["findings"] == 0, report.temporal
    per_stage = dp * tp * cp
    for rank, graph in enumerate(prepared.dist.graphs):
        stage = rank // per_stage
        assert {s for s, _ in graph.positions.values()} == {stage}
        assert {m for _, m in graph.positions.values()} == set(range(microbatches))
        p2p = graph.events.p2p()  # one activation and one gradient per microbatch, with the other stage's rank
        assert len(p2p) == 2 * microbatches and {e.peer for e in p2p} == {rank + (1 - 2 * stage) * per_stage}
        groups = {}
        for e in graph.events.events:
            if e.kind == ISSUE and e.peer is None:
                groups.setdefault(e.op, set()).add(e.ranks)
        same = [r for r in range(stage * per_stage, (stage + 1) * per_stage)]
        tp_group = tuple(r for r in same if r // (tp * cp) == rank // (tp * cp) and r % cp == rank % cp)
        dp_group = tuple(r for r in same if r % (tp * cp) == rank % (tp * cp))
        assert tp_group in groups["all_reduce"] and dp_group in groups["all_reduce"], groups
        assert groups["broadcast"] == {tuple(rank % per_stage + s * per_stage for s in range(pp))}
        if cp > 1:
            cp_group = tuple(range(rank - rank % cp, rank - rank % cp + cp))
            assert groups["all_to_all"] == {cp_group} and cp_group in groups["all_reduce"], groups


@pytest.mark.slow  # ~30 s alone, minutes beside other tests on 2 cores: over make test's 30 s per representative
def test_llama_dp2_pp2_tp2_1f1b_verified(mesh3d):
    """Loss and every gradient equal the whole model's step: tp-sharded ones as Megatron shards
    them; the P2P between the two stages' ranks of the same (dp, tp) coordinates; f/g over tp
    and the gradient all_reduce over dp, on their groups; no temporal finding."""
    prepared, report = mesh3d
    assert report.status == "verified", (report.reason, report.findings[:1])
    holds = {o.name: o.holds for o in report.outputs}
    assert holds["loss"] == "Replicate()" and holds["grad:layers.0.attention_norm.weight"] == "Replicate()"
    # column-parallel rows / row-parallel columns split over tp, whole over the other axes
    assert holds["grad:layers.1.wq.weight"] == "Mesh([4, 2], (Replicate(), Shard(0)))", holds
    assert holds["grad:layers.0.w2.weight"] == "Mesh([4, 2], (Replicate(), Shard(1)))", holds
    _check_groups(prepared, report, pp=2, dp=2, tp=2, cp=1, microbatches=4)


@pytest.mark.sweep  # ~26 CPU s (twice the 1F1B step's: four blocks), minutes beside other tests on 2 cores
def test_llama_dp2_pp2_tp2_interleaved_verified():
    """Megatron's interleaved 1F1B on the same mesh (four blocks, two model chunks per rank, 4
    microbatches): every gradient equals the whole model's, tp-sharded ones as Megatron shards
    them; each rank runs virtual stages stage and stage + pp, every microbatch on each, and
    exchanges only with the other stage's rank of its own (dp, tp) coordinates; the tp f/g and
    the dp gradient all_reduce on their groups; no temporal finding."""
    prepared, report = _verified("pipeline_llama_3d_interleaved", 8)
    assert report.status == "verified", (report.reason, report.findings[:1])
    holds = {o.name: o.holds for o in report.outputs}
    assert holds.pop("loss") == "Replicate()" and len(holds) == 4 * 9, holds
    assert holds["grad:layers.3.wq.weight"] == "Mesh([4, 2], (Replicate(), Shard(0)))", holds
    assert holds["grad:layers.0.w2.weight"] == "Mesh([4, 2], (Replicate(), Shard(1)))", holds
    assert report.temporal["checked"] and report.temporal["findings"] == 0, report.temporal
    for rank, graph in enumerate(prepared.dist.graphs):
        stage = rank // 4
        assert {s for s, _ in graph.positions.values()} == {stage, stage + 2}
        assert {m for _, m in graph.positions.values()} == set(range(4))
        # 3 virtual-stage boundaries x 4 microbatches, each way: every rank is one end of each message
        p2p = graph.events.p2p()
        assert {e.peer for e in p2p} == {rank + (4 if stage == 0 else -4)} and len(p2p) == 2 * 3 * 4, len(p2p)
        groups = {e.ranks for e in graph.events.events if e.kind == ISSUE and e.op == "all_reduce"}
        same = range(stage * 4, stage * 4 + 4)
        assert tuple(r for r in same if r // 2 == rank // 2) in groups  # tp
        assert tuple(r for r in same if r % 2 == rank % 2) in groups  # dp


@pytest.mark.sweep  # ~45 s alone, minutes beside other tests (tests/test_fourd.py: the same rules at pp2 x cp2)
def test_llama_4d_dp_pp_tp_cp_verified():
    """The 4-D mesh (16 ranks): Ulysses all_to_all over cp on every rank (grouped-query: one KV
    head per cp rank), gradients, loss and token count summed over cp, then dp; the P2P of
    flattened sequence shards between the stages. Verified, confirmed by execution."""
    prepared, report = _verified("pipeline_llama_4d", 16)
    assert report.status == "verified", (report.reason, report.findings[:1])
    holds = {o.name: o.holds for o in report.outputs}
    # the KV rows split over tp (cp and the other axes hold them whole)
    kv_rows = "Slices(0, {" + ", ".join(f"{r}: {(0, 4) if r // 2 % 2 == 0 else (4, 8)}" for r in range(8)) + "})"
    assert holds["grad:layers.1.wk.weight"] == f"Mesh([2, 8], (Replicate(), {kv_rows}))", holds
    _check_groups(prepared, report, pp=2, dp=2, tp=2, cp=2, microbatches=2)


@pytest.mark.sweep
@pytest.mark.parametrize("name,world,cp", [("pipeline_llama_3d", 8, 1), ("pipeline_llama_3d_interleaved", 8, 1),
                                           ("pipeline_llama_4d", 16, 2)])
def test_mesh_steps_correct_on_gloo(name, world, cp, monkeypatch):
    """The label: each rank's gradients are its shard of the single-device ones on a real gloo group."""
    monkeypatch.setenv("SHARDPROOF_GLOO_TIMEOUT_S", "300")
    assert tp_gradients_agree(os.path.join(TRAIN, name + ".py"), world, tp=2, cp=cp)


@pytest.mark.sweep
@pytest.mark.parametrize("name", TRACKER_BUGS)
def test_tracker_bugs_wrong_on_gloo(name):
    """The label of each bug from a tracker: wrong gradients on gloo (its correct twin,
    pipeline_mlp_1f1b at pp2, is labelled correct by tests/test_pipeline.py)."""
    single, ranks = training_gradients(os.path.join(TRAIN, "bugs", name + ".py"), 2, timeout=120)
    assert all(isinstance(r, dict) for r in ranks), ranks
    assert not all(torch.allclose(r[n].double(), g.detach().double(), rtol=1e-5, atol=1e-6)
                   for r in ranks for n, g in single.items())
