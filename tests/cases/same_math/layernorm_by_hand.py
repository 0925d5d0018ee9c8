"""Same math (issue 15, form 3): LayerNorm written by hand on a hidden-sharded activation,
from the all-reduced sum and sum of squares (``var = E[h^2] - E[h]^2``), against
``native_layer_norm`` of the whole (a polynomial identity).

Buggy twins (``bug=True``), by ``wrong``: "missing" leaves the mean's square out of the
variance (a missing term); "flipped" computes ``E[h]^2 - E[h^2]`` (the terms' signs swapped);
"unbiased" divides by ``n - 1`` where layer norm divides by ``n``."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case

T, H, EPS = 3, 8, 1e-5


def single(h, weight, bias):
    return {"out": F.layer_norm(h, (H,), weight, bias, EPS)}


def _variance(s1, s2, wrong):
    mean = s1 / H
    if wrong == "missing":
        return s2 / H  # BUG: the E[h]^2 term is missing
    if wrong == "flipped":
        return mean * mean - s2 / H  # BUG: E[h]^2 - E[h^2], the terms swapped (negative: NaN)
    if wrong == "unbiased":
        return (s2 - s1 * mean) / (H - 1)  # BUG: the n - 1 divisor of torch.var, not layer norm's n
    return s2 / H - mean * mean


def distributed(rank, world, bug=False, wrong="missing"):
    def program(h, weight, bias):
        s1 = h.sum(-1, keepdim=True)
        s2 = (h * h).sum(-1, keepdim=True)
        dist.all_reduce(s1)
        dist.all_reduce(s2)
        mean = s1 / H
        var = _variance(s1, s2, wrong if bug else None)
        return {"out": (h - mean) * torch.rsqrt(var + EPS) * weight + bias}
    return program


def shard(rank, world, inputs):
    return {k: t.chunk(world, -1)[rank] for k, t in inputs.items()}


def case(world_size: int = 2, bug: bool = False, wrong: str = "missing") -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {"h": torch.randn(T, H, generator=g), "weight": torch.randn(H, generator=g),
              "bias": torch.randn(H, generator=g)}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, bug, wrong), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name="same_math_layernorm" + (f"_bug_{wrong}" if bug else ""),
                expect={"out": "Shard(1)"})
