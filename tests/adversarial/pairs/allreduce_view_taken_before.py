"""Row-parallel partial sums; Trap: a view taken before the in-place all_reduce sees the reduced values."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x, w):
    y = x @ w
    return y[:, :2]


def distributed(rank, world, x, w):
    y = x @ w
    v = y[:, :2]
    dist.all_reduce(y)
    return v


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
