"""Integer division of per-rank counts before summing them: floor(a/2) + floor(b/2) != floor((a+b)/2)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "casts"


def single(x):
    return (x > 0).long().sum(0) // 2


def distributed(rank, world, x):
    c = (x > 0).long().sum(0) // 2  # BUG
    dist.all_reduce(c)
    return c


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(9, 16)}, shard={"x": 0})
