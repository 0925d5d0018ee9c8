"""type_as an integer tensor (the ids) applied to a partial sum: a truncation per rank."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "casts"


def single(x, w, ids):
    return (x @ w).type_as(ids)


def distributed(rank, world, x, w, ids):
    y = (x @ w).type_as(ids)  # BUG
    dist.all_reduce(y)
    return y


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8) * 2, "w": torch.randn(8, 6),
                                         "ids": torch.arange(3)}, shard={"x": 1, "w": 0})
