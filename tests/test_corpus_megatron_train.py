"""The corpus: a training step of megatron-core's own GPT (GQA, SwiGLU, RMSNorm, RoPE; TP + SP),
examples/corpus/megatron_gpt_train.py -- megatron's loss path (vocab-parallel cross-entropy),
autograd through its tensor-parallel mappings, and its own all-reduce of the sequence-parallel
norms' gradients. Verified at TP 2 and 4 (TP 4 slow); a norm weight without megatron's
``sequence_parallel`` mark (its gradient never all-reduced) is a missing gradient reduction at
that norm. Labels (facts about PyTorch, test_labels_on_gloo: slow, sweep): on a real gloo group the correct
step's loss and gradients equal the single device's, the bug's norm gradient does not."""
import os
import sys

import pytest

pytest.importorskip("megatron.core", reason="the megatron-core corpus needs megatron-core (the `corpus` extra)")

from shardproof import api  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "examples", "corpus")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(__file__))

import megatron_gpt_train  # noqa: E402

BUG = megatron_gpt_train.BUG


def _check_correct(report):
    assert report.status == "verified", (report.status, report.reason, report.findings[:1])
    holds = {o.name: o.holds for o in report.outputs}
    assert holds.pop("loss") == "Replicate()", holds
    assert holds["grad:model.decoder.layers.0.self_attention.linear_qkv.weight"] == "Shard(0)", holds
    assert holds["grad:model.decoder.layers.0.self_attention.linear_proj.weight"] == "Shard(1)", holds
    assert holds["grad:model.decoder.layers.0.mlp.linear_fc1.weight"].startswith("Interleaved(0"), holds
    assert holds["grad:model.embedding.word_embeddings.weight"] == "Shard(0)", holds
    for name in ("decoder.layers.0.input_layernorm", "decoder.layers.1.pre_mlp_layernorm", "decoder.final_layernorm"):
        assert holds[f"grad:model.{name}.weight"] == "Replicate()", holds  # all-reduced by megatron
    assert len(holds) == 15 and all(h is not None for h in holds.values()), holds


def _check_bug(report, world):
    assert report.status == "violation", (report.status, report.reason)
    f = report.findings[0]
    assert f.kind == "missing-gradient-reduction" and f.rank == list(range(world)), f
    assert "_forward_pre_mlp_layernorm" in f.source, f  # layer 0's pre-MLP norm, whose mark was dropped
    assert 'Partial("sum")' in f.message, f.message
    holds = {o.name: o.holds for o in report.outputs}
    assert holds["grad:model.decoder.layers.0.pre_mlp_layernorm.weight"] is None, holds
    assert holds["grad:model.decoder.layers.1.pre_mlp_layernorm.weight"] == "Replicate()", holds


def test_megatron_training_step_tp2_verifies():
    _check_correct(api.verify_case(megatron_gpt_train.make_case(2)))


@pytest.mark.slow
def test_norm_gradient_not_reduced_is_located():
    _check_bug(api.verify_case(megatron_gpt_train.make_case(2, BUG)), 2)


@pytest.mark.slow
def test_megatron_training_step_tp4():
    _check_correct(api.verify_case(megatron_gpt_train.make_case(4)))
    _check_bug(api.verify_case(megatron_gpt_train.make_case(4, BUG)), 4)


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("world", [2, 4])
def test_labels_on_gloo(world):
    """Loss and the replicated (norm) gradients on a real gloo group against the single device:
    equal for the correct step; the bug's layer-0 pre-MLP norm gradient differs on every rank."""
    import numpy as np
    import torch
    from gloo import run_fn_on_gloo, train_step_on_rank
    import megatron_gpt as mg
    case = megatron_gpt_train.make_case(world)
    params = dict(case.single.named_parameters())
    with mg.tp1_state(True), mg.cpu_route():
        logits = case.single.model(case.inputs["input_ids"], case.inputs["position_ids"], case.inputs["attention_mask"])
        loss = case.train.loss(logits, case.inputs)
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
    norms = [n for n in grads if n.endswith("norm.weight")]
    wrong = "model.decoder.layers.0.pre_mlp_layernorm.weight"
    for bug in (None, BUG):
        for rank_loss, rank_grads in run_fn_on_gloo(train_step_on_rank(megatron_gpt_train, bug), world, timeout=300):
            assert abs(rank_loss - float(loss)) < 1e-5
            diffs = {n: float(np.abs(rank_grads[n] - grads[n].numpy()).max()) for n in norms}
            if bug is None:
                assert max(diffs.values()) < 1e-6, diffs
            else:
                assert diffs[wrong] > 1e-4 and max(v for n, v in diffs.items() if n != wrong) < 1e-6, diffs


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])  # TP 4: the dumps make corpus writes beside TP 2
def test_training_dump_pair_verifies_and_bug_is_a_violation(tmp_path, monkeypatch, world):
    """The generator's joint fw+bw dumps (make corpus) at TP 2 and 4 with the relations file it writes
    (fc1's [gate_r; up_r] layout, each gradient expected as its parameter): verified, and the
    unreduced norm gradient a partial sum never reduced, at that norm."""
    import dump_libraries
    monkeypatch.setattr(dump_libraries, "WORLDS", (world,))
    rows = dump_libraries.dump_steps("megatron_gpt_train", BUG, str(tmp_path))
    assert [r[3] for r in rows] == ["verified", "violation"]
    ok = api.verify_dumps(*rows[0][:3], auto_relations=True)
    assert ok.status == "verified", (ok.status, ok.reason)
    assert {o.name: o.holds for o in ok.outputs}["loss"] == "Replicate()"
    bad = api.verify_dumps(*rows[1][:3], auto_relations=True)
    assert bad.status == "violation", (bad.status, bad.reason)
    f = bad.findings[0]
    assert f.kind == "partial-sum-never-reduced" and "_forward_pre_mlp_layernorm" in f.source, f
