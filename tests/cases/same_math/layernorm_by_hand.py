"""Same math (issue 15, form 3): LayerNorm written by hand on a hidden-sharded activation,
from the all-reduced sum and sum of squares (``var = E[h^2] - E[h]^2``), against
``native_layer_norm`` of the whole (a polynomial identity).

Buggy twin (``bug=True``): the mean's square is left out of the variance (a missing term)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case

T, H, EPS = 3, 8, 1e-5


def single(h, weight, bias):
    return {"out": F.layer_norm(h, (H,), weight, bias, EPS)}


def distributed(rank, world, bug=False):
    def program(h, weight, bias):
        s1 = h.sum(-1, keepdim=True)
        s2 = (h * h).sum(-1, keepdim=True)
        dist.all_reduce(s1)
        dist.all_reduce(s2)
        mean = s1 / H
        var = s2 / H if bug else s2 / H - mean * mean  # BUG (bug=True): the E[h]^2 term is missing
        return {"out": (h - mean) * torch.rsqrt(var + EPS) * weight + bias}
    return program


def shard(rank, world, inputs):
    return {k: t.chunk(world, -1)[rank] for k, t in inputs.items()}


def case(world_size: int = 2, bug: bool = False) -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {"h": torch.randn(T, H, generator=g), "weight": torch.randn(H, generator=g),
              "bias": torch.randn(H, generator=g)}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, bug), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name="same_math_layernorm" + ("_bug" if bug else ""),
                expect={"out": "Shard(1)"})
