"""Trap: an int cast applied elementwise on each shard before the sum (the truncation is per
element, so it commutes with the split of the sum)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "casts"


def single(x):
    return (x * 10).long().sum(0)


def distributed(rank, world, x):
    s = (x * 10).long().sum(0)
    dist.all_reduce(s)
    return s


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(8, 5)}, shard={"x": 0})
