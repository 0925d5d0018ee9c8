"""Trap: type_as a float tensor of the same dtype is the identity, even on a partial sum."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "casts"


def single(x, w, ref):
    return x @ w


def distributed(rank, world, x, w, ref):
    y = (x @ w).type_as(ref)
    dist.all_reduce(y)
    return y


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6), "ref": torch.randn(2)},
                   shard={"x": 1, "w": 0})
