"""Trap: the partial sum all-reduced in place through its transpose -- a dense but
non-contiguous view. A sum is elementwise, so the storage order does not matter."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "collectives"


def single(x, w):
    return x @ w


def distributed(rank, world, x, w):
    y = (x @ w).t()
    dist.all_reduce(y)
    return y.t()


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
