"""Trap: positives counted per sequence shard (a bool cast to int64), the counts summed."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "casts"


def single(x):
    return (x > 0).long().sum(0)


def distributed(rank, world, x):
    c = (x > 0).long().sum(0)
    dist.all_reduce(c)
    return c


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(8, 5)}, shard={"x": 0})
