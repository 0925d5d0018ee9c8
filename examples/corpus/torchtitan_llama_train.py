"""A training step of torchtitan's Llama 3 (examples/corpus/torchtitan_llama.py: GQA, fused wqkv,
SwiGLU, complex RoPE), parallelized by torchtitan itself (TP + SP), as torchtitan's trainer takes
it: the vocab-sharded logits (a DTensor ``Shard(2)``) into cross-entropy under PyTorch's
``loss_parallel()`` (what torchtitan's ``enable_loss_parallel`` turns on), autograd through the
DTensor plan (its backward collectives), each gradient laid out as its parameter.
Checked: the loss, and every gradient.

    shardproof verify examples/corpus/torchtitan_llama_train.py --world-size 2   # exit 0: verified
    BUG=wo_output_replicated shardproof verify examples/corpus/torchtitan_llama_train.py   # violation

``bug="wo_output_replicated"``: a plan mistake that does not raise. Layer 0's attention output
projection ``wo`` (rowwise) declares its output as already summed (``out_src_shardings`` tp
``Replicate`` instead of ``Partial``): DTensor then takes each rank's partial product for the
whole sum and only cuts the rank's sequence shard out of it, where the plan needed a
reduce-scatter. It runs on a real gloo group; the logits and gradients differ from the single
device's (tests/test_corpus_torchtitan.py).
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

BUG = "wo_output_replicated"


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

    def with_wrong_wo(cfg, enable_sp):
        original(cfg, enable_sp=enable_sp)
        wo = cfg.layers[0].attention.wo.sharding_config
        wo.out_src_shardings = dense_activation_placement(tp=spmd.R)

    tt.set_llama3_sharding_config = with_wrong_wo
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
