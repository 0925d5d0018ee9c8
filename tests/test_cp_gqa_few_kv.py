"""Ulysses GQA training with fewer KV heads than cp ranks (2 KV heads at cp 4, issue 18): each
KV head repeated per group before the all_to_all (DeepSpeed-Ulysses), so each rank holds one
replica. Its two bug twins -- the heads tiled instead of repeated per group, and the replicas
sent one rank off (a neighbour's replica) -- are violations at the attention of exactly the
ranks whose query heads meet another group's KV head (tests/test_training.py checks node, op,
class, ranks, source line and hint against their meta, in make test). The correct step
verifies at cp 2 (1 KV head, here) and cp 4 (tests/test_fourd.py): the replicas' partial
gradients, each through RoPE's backward and the all_to_all, complete in the repeat's backward
(algebra/sum_pieces.py; its torch-judged harness: tests/harness/test_sum_pieces_vs_torch.py).
Labels: every program here run on a real gloo group (the correct one agrees with the whole
model's step, the bugs do not)."""
import importlib
import os

import pytest

from conftest import ZOO

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import tp_gradients_agree, training_gradients  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402

TRAIN = os.path.join(ZOO, "train")
BUGS = os.path.join(TRAIN, "bugs")
TWINS = ("ulysses_gqa_train_kv_tiled", "ulysses_gqa_train_kv_wrong_rank")


@pytest.mark.parametrize("name", TWINS)
def test_bug_twins_state_the_ranks_meeting_another_group(name):
    """The ranks each twin's meta names are exactly those whose KV replica is of another group
    than their query heads' (computed here from the widening the twin does)."""
    module = importlib.import_module(name)
    block = next(v for k, v in vars(module).items() if k.endswith("Block") and v.__module__ == module.__name__)
    heads = torch.arange(2).view(1, 2, 1, 1).float()  # KV head j holds the value j

    class Group:  # what widen_kv asks of the cp group
        pass
    fake = block.__new__(block)
    fake.cp_group = Group()
    from unittest import mock
    with mock.patch("torch.distributed.get_world_size", return_value=4):
        replicas = fake.widen_kv(heads).view(4).tolist()
    own = [r * 2 // 4 for r in range(4)]  # rank r's query heads 2r, 2r+1 share KV head (2r) // 4
    wrong = [r for r in range(4) if replicas[r] != own[r]]
    assert wrong == module.case(4).meta["bug_ranks"], (replicas, own)


def test_neighbours_replica_located():
    """The replica sent one rank off: a violation at the first layer's attention (forward,
    microbatch 0) on ranks 1 and 3 only, the key/value operand named as another rank's piece.
    (Both twins run against their full meta in tests/test_training.py's sweep.)"""
    meta = importlib.import_module(TWINS[1]).case(4).meta
    report = verify_prepared(prepare(importlib.import_module(TWINS[1]).case(4), 4), fixes=False)
    assert report.status == "violation", report.reason
    f = report.findings[0]
    assert (f.node, f.op, f.kind, sorted(f.rank), f.microbatch) == (
        meta["bug_node"], meta["bug_op"], meta["bug"], meta["bug_ranks"], 0), f
    assert meta["hint"] in f.hint and "mini_mesh.py:117" in f.source, (f.hint, f.source)


@pytest.mark.sweep
@pytest.mark.parametrize("name", TWINS)
def test_bug_twins_wrong_on_gloo(name, monkeypatch):
    """Every rank completes its step (no hang, no error) and some gradient differs from the whole model's."""
    monkeypatch.setenv("SHARDPROOF_GLOO_TIMEOUT_S", "300")
    single, ranks = training_gradients(os.path.join(BUGS, name + ".py"), 4, timeout=600)
    assert all(isinstance(r, dict) for r in ranks), ranks
    assert not all(torch.allclose(r[n].double(), g.detach().double(), rtol=1e-5, atol=1e-6)
                   for r in ranks for n, g in single.items())


def test_correct_step_verified_at_cp2():
    """One KV head at cp 2: each rank's replica meets 4 of the 8 query heads; every gradient
    proved equal to the whole model's (replicated), loss included."""
    report = verify_prepared(prepare(importlib.import_module("ulysses_gqa_train_widened").case(2), 2), fixes=False)
    assert report.status == "verified", report.reason
    holds = {o.name: o.holds for o in report.outputs}
    assert holds["loss"] == holds["grad:layers.0.wk.weight"] == holds["grad:layers.1.wv.weight"] == "Replicate()"


@pytest.mark.sweep
def test_correct_step_cp2_agrees_on_gloo(monkeypatch):
    monkeypatch.setenv("SHARDPROOF_GLOO_TIMEOUT_S", "300")
    assert tp_gradients_agree(os.path.join(TRAIN, "ulysses_gqa_train_widened.py"), 2, tp=1, cp=2)
