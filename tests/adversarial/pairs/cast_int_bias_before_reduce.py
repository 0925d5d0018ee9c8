"""Trap: a bias of integers cast to float and added on rank 0 only, before the all_reduce."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "casts"


def single(x, w, b):
    return x @ w + b.float()


def distributed(rank, world, x, w, b):
    y = x @ w
    if rank == 0:
        y = y + b.float()
    dist.all_reduce(y)
    return y


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6),
                                         "b": torch.randint(-3, 4, (6,))}, shard={"x": 1, "w": 0})
