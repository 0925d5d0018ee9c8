"""Softmax over a vocabulary-sharded dim, each rank subtracting its own max before the
exponentials whose sums are all-reduced: the ranks' terms are scaled differently."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "confirm"


def single(x):
    return x.softmax(-1)


def distributed(rank, world, x):
    e = (x - x.max(-1, keepdim=True).values).exp()  # BUG: a per-rank max
    z = e.sum(-1, keepdim=True)
    dist.all_reduce(z)
    return e / z


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 8) * 3}, shard={"x": 1}, expect="Shard(1)")
