"""A batch mean computed as a per-rank int-rounded mean, then averaged."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "casts"


def single(x):
    return (x.mean(0) * 10).round().long()


def distributed(rank, world, x):
    m = (x.mean(0) * 10).round()  # BUG: rounds each rank's mean
    dist.all_reduce(m)
    return (m / world).round().long()


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(8, 6)}, shard={"x": 0})
