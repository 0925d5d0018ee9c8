"""A training step of megatron-core's GPT (examples/corpus/megatron_gpt.py: GQA, SwiGLU, RMSNorm,
RoPE, TP + SP), as megatron takes it: the model's own loss path (``GPTModel.forward(...,
labels=...)``: megatron's ``vocab_parallel_cross_entropy`` over the vocab-parallel logits), the
mean over tokens, autograd through megatron's tensor-parallel mappings (their backward
collectives), then megatron's own ``_allreduce_non_tensor_model_parallel_grads`` (what
``finalize_model_grads`` calls): the gradients of the parameters marked ``sequence_parallel``
(the norms, whose inputs are sequence shards) summed over the tensor-parallel group.
Checked: the loss, and each gradient laid out as its parameter is.

    shardproof verify examples/corpus/megatron_gpt_train.py --world-size 2     # exit 0: verified
    BUG=norm_grad_not_reduced shardproof verify examples/corpus/megatron_gpt_train.py   # violation

``bug="norm_grad_not_reduced"``: layer 0's ``pre_mlp_layernorm`` weight loses its
``sequence_parallel`` attribute (a norm built without apex's marking), so megatron does not
all-reduce its gradient: each rank keeps the gradient of its own sequence chunk. Nothing
raises; the ranks' gradients differ from the single device's (tests/test_corpus_megatron.py).
"""
from __future__ import annotations

import os
import sys
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_gpt as mg  # noqa: E402
from megatron.core.distributed.finalize_model_grads import _allreduce_non_tensor_model_parallel_grads  # noqa: E402

from shardproof import Case, Train  # noqa: E402

BUG = "norm_grad_not_reduced"


def next_token_loss(logits, inputs):
    return F.cross_entropy(logits.reshape(-1, mg.VOCAB), inputs["labels"].reshape(-1))


class _Grad:
    """A parameter as megatron's gradient finalization reads it: its flags and ``.grad``."""

    def __init__(self, param, grad):
        self.requires_grad = True
        self.sequence_parallel = getattr(param, "sequence_parallel", False)
        self.grad = grad


def finalize(model, grads: dict) -> dict:
    """megatron's all-reduce of the sequence-parallel parameters' gradients over the TP group,
    on the gradients autograd gave (a model chunk of stand-ins holding them as ``.grad``)."""
    held = {n: _Grad(p, grads[n]) for n, p in model.named_parameters()}
    chunk = types.SimpleNamespace(ddp_config=types.SimpleNamespace(use_megatron_fsdp=False),
                                  named_parameters=lambda: list(held.items()))
    _allreduce_non_tensor_model_parallel_grads([chunk], model.config)
    return {n: h.grad for n, h in held.items()}


class TrainLogits(mg.Logits):
    """Logits with the training step shardproof asks the distributed program for."""

    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        with mg.cpu_route():
            per_token = self.model(inputs["input_ids"], inputs["position_ids"], inputs["attention_mask"],
                                   labels=inputs["labels"])
            loss = per_token.mean()
            grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        inner = finalize(self.model, {n.split(".", 1)[1]: g for n, g in grads.items()})
        return {"loss": loss, "grads": {n: inner[n.split(".", 1)[1]] for n in params}}


def rank_model(full, rank: int, world: int, bug=None) -> TrainLogits:
    model = mg.rank_model(full, rank, world).model
    if bug == BUG:
        del model.decoder.layers[0].pre_mlp_layernorm.weight.sequence_parallel
    return TrainLogits(model)


def make_case(world_size: int = 2, bug: str | None = None) -> Case:
    full = mg.single_model()
    torch.manual_seed(1)
    ids = torch.randint(0, mg.VOCAB, (mg.BATCH, mg.SEQ))
    inputs = {"input_ids": ids, "position_ids": torch.arange(mg.SEQ).expand(mg.BATCH, mg.SEQ).contiguous(),
              "attention_mask": torch.triu(torch.ones(1, 1, mg.SEQ, mg.SEQ, dtype=torch.bool), 1),
              "labels": torch.roll(ids, -1, 1)}
    return Case(single=mg.Logits(full, single=True),
                distributed=lambda rank, world: rank_model(full, rank, world, bug),
                inputs=inputs, world_size=world_size, train=Train(loss=next_token_loss),
                name=f"megatron_gpt_train{'_' + bug if bug else ''}",
                meta={"source": "megatron-core GPTModel training step (TP + SP)", "bug": bug},
                description="megatron-core GPT training step (loss, every gradient), TP + SP")


def case(world_size: int = 2) -> Case:
    return make_case(world_size, os.environ.get("BUG") or None)
