"""Row-parallel partial sums; reshape of a transpose is a copy, taken before the all_reduce: it keeps the partial sum."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "confirm"


def single(x, w):
    y = x @ w
    return y


def distributed(rank, world, x, w):
    y = x @ w
    v = y.t().reshape(-1)  # BUG: reshape of a transpose copies
    dist.all_reduce(y)
    return v.view(6, 4).t()


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
