"""The corpus: a training step of torchtitan's own Llama 3 (GQA with a fused wqkv, SwiGLU, complex
RoPE; torchtitan's TP + SP plan), examples/corpus/torchtitan_llama_train.py -- cross-entropy of
the vocab-sharded logits under ``loss_parallel()``, autograd through the DTensor plan. Verified
at TP 2 and 4 (TP 4 slow); a silent plan mistake (the token ids declared ``Partial``: DTensor
all-reduces them) is a violation at that all-reduce. Labels (facts about PyTorch,
test_labels_on_gloo: slow, sweep): on a real gloo group the correct step's loss and gradients equal the single
device's; the mistake runs and its loss differs."""
import os
import sys

import pytest

pytest.importorskip("triton", reason="torchtitan 0.3.0 imports triton unconditionally (the `corpus` extra)")
pytest.importorskip("torchtitan.models.llama3", reason="the torchtitan corpus needs torchtitan, spmd_types, tyro")

from shardproof import api  # noqa: E402

for folder in (os.path.join(os.path.dirname(__file__), "..", "examples", "corpus"), os.path.dirname(__file__)):
    sys.path.insert(0, folder)  # the case modules, and tests/gloo.py

import torchtitan_llama_train  # noqa: E402

BUG = torchtitan_llama_train.BUG


def _check_correct(report):
    assert report.status == "verified", (report.status, report.reason, report.findings[:1])
    holds = {o.name: o.holds for o in report.outputs}
    assert holds.pop("loss") == "Replicate()", holds
    assert holds["grad:model.tok_embeddings.weight"] == "Shard(0)", holds  # clamp-and-mask lookup's gradient
    assert holds["grad:model.layers.0.attention.qkv_linear.wqkv.weight"] == "Shard(0)", holds  # GQA backward
    assert holds["grad:model.layers.0.attention.wo.weight"] == "Shard(1)", holds
    assert holds["grad:model.lm_head.weight"] == "Shard(0)", holds  # loss_parallel's backward
    assert holds["grad:model.layers.1.ffn_norm.weight"] == "Replicate()", holds
    assert len(holds) == 17 and all(h is not None for h in holds.values()), holds


def _check_bug(report, world):
    assert report.status == "violation", (report.status, report.reason)
    f = report.findings[0]
    assert f.op == "_c10d_functional.all_reduce" and f.rank == list(range(world)), f
    assert "tokens" in f.message, f.message  # the all-reduced token ids


def test_torchtitan_training_step_tp2_verifies():
    _check_correct(api.verify_case(torchtitan_llama_train.make_case(2)))


@pytest.mark.slow
def test_torchtitan_training_step_tp4():
    _check_correct(api.verify_case(torchtitan_llama_train.make_case(4)))
    _check_bug(api.verify_case(torchtitan_llama_train.make_case(4, BUG)), 4)


@pytest.mark.slow
def test_ids_declared_partial_is_located():
    _check_bug(api.verify_case(torchtitan_llama_train.make_case(2, BUG)), 2)


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("world", [2, 4])
def test_labels_on_gloo(world):
    """On a real gloo group: the correct step's loss and every gradient equal the single device's;
    the plan mistake runs (nothing raises) and its loss differs."""
    import numpy as np
    import torch
    from gloo import run_fn_on_gloo, train_step_on_rank
    case = torchtitan_llama_train.make_case(world)
    params = dict(case.single.named_parameters())
    loss = case.train.loss(case.single(case.inputs["tokens"]), case.inputs)
    grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
    for rank_loss, rank_grads in run_fn_on_gloo(train_step_on_rank(torchtitan_llama_train), world, timeout=300):
        assert abs(rank_loss - float(loss)) < 1e-5, (rank_loss, float(loss))
        for n, g in grads.items():
            np.testing.assert_allclose(rank_grads[n], g.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)
    for rank_loss, _ in run_fn_on_gloo(train_step_on_rank(torchtitan_llama_train, BUG), world, timeout=300):
        assert abs(rank_loss - float(loss)) > 1e-3, (rank_loss, float(loss))


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])  # TP 4: the dumps make corpus writes beside TP 2
def test_dumps_verify_and_bug_is_a_violation(tmp_path, monkeypatch, world):
    """The generator's readable dumps (make corpus) at TP 2 and 4: torchtitan's forward and its training
    step (joint fw+bw, complex RoPE buffers included: executed as complex) verified from the
    text alone; the plan mistake's step a violation at the all-reduced ids."""
    import dump_libraries
    monkeypatch.setattr(dump_libraries, "WORLDS", (world,))
    dump_libraries.dump_case("torchtitan_llama", None, str(tmp_path))
    root, tp = tmp_path / "torchtitan_llama", f"tp{world}"
    fw = api.verify_dumps(str(root / "tp1"), str(root / tp), str(root / f"{tp}.yaml"), auto_relations=True)
    assert fw.status == "verified", (fw.status, fw.reason)
    rows = dump_libraries.dump_steps("torchtitan_llama_train", BUG, str(tmp_path))
    ok = api.verify_dumps(*rows[0][:3], auto_relations=True)
    assert ok.status == "verified", (ok.status, ok.reason)
    bad = api.verify_dumps(*rows[1][:3], auto_relations=True)
    assert bad.status == "violation" and bad.findings[0].op == "_c10d_functional.all_reduce", (bad.status, bad.reason)
