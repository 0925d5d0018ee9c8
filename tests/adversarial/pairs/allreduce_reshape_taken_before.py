"""Row-parallel partial sums; Trap: reshape of a contiguous tensor is a view, so it too sees the reduced values."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x, w):
    y = x @ w
    return y


def distributed(rank, world, x, w):
    y = x @ w
    v = y.reshape(-1)
    dist.all_reduce(y)
    return v.view(4, 6)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
