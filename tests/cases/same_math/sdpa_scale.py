"""Same math (issue 15, form 5): head-parallel attention calling SDPA with an explicit
``scale=1/sqrt(d)`` against the single-device SDPA with its default scale.

Buggy twin (``bug=True``): the scale is taken from the rank's hidden width
(``1/sqrt(local_heads * d)``) instead of the head dim: wrong scale."""
import math

import torch
import torch.nn.functional as F

from shardproof import Case

B, H, S, D = 2, 8, 5, 8


def single(q, k, v):
    return {"out": F.scaled_dot_product_attention(q, k, v, is_causal=True)}


def distributed(rank, world, bug=False):
    def program(q, k, v):
        d = q.shape[-1] * (q.shape[1] if bug else 1)  # BUG (bug=True): the rank's width, not the head dim
        return {"out": F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(d))}
    return program


def shard(rank, world, inputs):
    return {k: t.chunk(world, 1)[rank] for k, t in inputs.items()}


def case(world_size: int = 2, bug: bool = False) -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(B, H, S, D, generator=g) for n in ("q", "k", "v")}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, bug), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name="same_math_sdpa" + ("_bug" if bug else ""),
                expect={"out": "Shard(1)"})
