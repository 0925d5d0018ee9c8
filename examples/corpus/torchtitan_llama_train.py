"""A training step of torchtitan's Llama 3 (examples/corpus/torchtitan_llama.py: GQA, fused wqkv,
SwiGLU, complex RoPE), parallelized by torchtitan itself (TP + SP), as torchtitan's trainer takes
it: the vocab-sharded logits (a DTensor ``Shard(2)``) into cross-entropy under PyTorch's
``loss_parallel()`` (what torchtitan's ``enable_loss_parallel`` turns on), autograd through the
DTensor plan (its backward collectives), each gradient laid out as its parameter.
Checked: the loss, and every gradient.

    shardproof verify examples/corpus/torchtitan_llama_train.py --world-size 2   # exit 0: verified
    BUG=ids_partial shardproof verify examples/corpus/torchtitan_llama_train.py   # violation

``bug="ids_partial"``: a plan mistake that does not raise. The token embedding's plan entry
declares its plain input (the token ids every rank holds whole) as ``Partial`` instead of
``Replicate`` (``in_src_shardings``): DTensor takes each rank's ids for a share of a sum and
all-reduces them before the lookup, so every rank looks up ``world * id``. torchtitan checks the
placements of DTensor inputs and outputs against the plan, not what a plain tensor is declared
to be; it runs on a real gloo group, and the loss and gradients differ from the single device's
(tests/test_corpus_torchtitan_train.py). (A wrong ``out_src_shardings`` on ``wo`` is refused at
run time: torchtitan compares it with the output's placements.)
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from torch.distributed.tensor.parallel import loss_parallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchtitan_llama as tt  # noqa: E402

from shardproof import Case, Train  # noqa: E402

BUG = "ids_partial"


def next_token_loss(logits, inputs):
    return F.cross_entropy(logits.reshape(-1, tt.VOCAB), inputs["labels"].reshape(-1))


def as_parameter(grad, param):
    """The gradient laid out as its parameter (a norm weight's comes back ``Partial``)."""
    placements = getattr(param, "placements", None)
    if placements is None or not hasattr(grad, "placements") or grad.placements == placements:
        return grad
    return grad.redistribute(param.device_mesh, placements)


class TrainLogits(tt.Logits):
    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        logits = self.model(inputs["tokens"])
        with loss_parallel():
            loss = F.cross_entropy(logits.flatten(0, 1), inputs["labels"].flatten())
            grads = torch.autograd.grad(loss, list(params.values()))
        return {"loss": loss, "grads": {n: as_parameter(g, params[n]) for n, g in zip(params, grads)}}


def rank_model(full, world: int, bug=None):
    if bug != BUG:
        return tt.rank_model(full, world)
    from torchtitan.models.common.decoder_sharding import dense_activation_placement, spmd
    original = tt.set_llama3_sharding_config

    def with_wrong_ids(cfg, enable_sp):
        original(cfg, enable_sp=enable_sp)
        cfg.tok_embeddings.sharding_config.in_src_shardings = {"input": dense_activation_placement(tp=spmd.P)}

    tt.set_llama3_sharding_config = with_wrong_ids
    try:
        return tt.rank_model(full, world)
    finally:
        tt.set_llama3_sharding_config = original


def make_case(world_size: int = 2, bug: str | None = None) -> Case:
    full = tt.single_model()
    torch.manual_seed(1)
    tokens = torch.randint(0, tt.VOCAB, (tt.BATCH, tt.SEQ))
    return Case(single=tt.Logits(full), distributed=lambda rank, world: TrainLogits(rank_model(full, world, bug)),
                inputs={"tokens": tokens, "labels": torch.roll(tokens, -1, 1)}, world_size=world_size,
                train=Train(loss=next_token_loss), name=f"torchtitan_llama_train{'_' + bug if bug else ''}",
                meta={"source": "torchtitan Llama3Model.parallelize training step (TP + SP, loss_parallel)", "bug": bug},
                description="torchtitan Llama 3 training step (loss, every gradient), its own TP + SP plan")


def case(world_size: int = 2) -> Case:
    return make_case(world_size, os.environ.get("BUG") or None)
