"""A training step of the tiny Hugging Face Llama (GQA) under transformers' own tp_plan
(examples/huggingface/hf_llama_tp.py): the next-token cross-entropy over the whole batch and
the gradient of every parameter, each rank's taken by autograd through transformers' DTensor
parallel styles (their backward collectives included). Checked: the loss, and each gradient
laid out as its parameter is (a sharded weight's gradient the same shard, a replicated one whole).

    shardproof verify examples/huggingface/hf_llama_tp_train.py
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama_tp import BATCH, SEQ, WORLD_SIZES, Logits, checkpoint, single_model, tp_model  # noqa: E402,F401

from shardproof import Case, Train  # noqa: E402

VOCAB = 128


def next_token_loss(logits, inputs):
    return F.cross_entropy(logits.reshape(-1, VOCAB), inputs["labels"].reshape(-1))


class TrainLogits(Logits):
    """Logits with the training step shardproof asks the distributed program for."""

    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        loss = next_token_loss(self(inputs["input_ids"], inputs["attention_mask"]), inputs)
        grads = torch.autograd.grad(loss, list(params.values()))
        return {"loss": loss, "grads": {n: as_parameter(g, params[n]) for n, g in zip(params, grads)}}


class BackwardLogits(Logits):
    """The training step as transformers' Trainer takes it: ``loss.backward()``, then each
    parameter's ``.grad`` -- so the hooks a plan puts on parameters run (Qwen3's and Gemma 3's
    ``replicated_with_grad_allreduce`` q/k-norms all-reduce their gradients in a
    post-accumulate-grad hook, which ``torch.autograd.grad`` never fires)."""

    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        for p in params.values():
            p.grad = None
        loss = next_token_loss(self(inputs["input_ids"], inputs["attention_mask"]), inputs)
        loss.backward()
        return {"loss": loss.detach(), "grads": {n: as_parameter(p.grad, p) for n, p in params.items()}}


def as_parameter(grad, param):
    """The gradient laid out as its parameter (an optimizer step needs it so): DTensor hands
    the vocab-parallel embedding's gradient back replicated (every rank the whole gradient)."""
    placements = getattr(param, "placements", None)
    if placements is None or grad.placements == placements:
        return grad
    return grad.redistribute(param.device_mesh, placements)


def make_case(world_size: int = 2, attn: str | None = None, plan: dict | None = None,
              name: str = "hf_llama_tp_train") -> Case:
    attn = attn or os.environ.get("ATTN", "eager")
    full = single_model(attn)
    path = checkpoint(full)
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return Case(single=Logits(full), distributed=lambda rank, world: TrainLogits(tp_model(path, world, attn, plan)),
                inputs={"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.roll(ids, -1, 1)},
                world_size=world_size, train=Train(loss=next_token_loss), name=f"{name}_{attn}",
                meta={"source": "transformers tp_plan (DistributedConfig) training step"})


def case(world_size: int = 2) -> Case:
    return make_case(world_size)
