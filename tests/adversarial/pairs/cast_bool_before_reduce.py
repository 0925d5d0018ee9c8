"""Row-parallel scores thresholded per rank ("is my partial positive") and the flags summed:
not whether the full score is positive."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "casts"


def single(x, w):
    return (x @ w).bool().float()


def distributed(rank, world, x, w):
    y = (x @ w).bool().float()  # BUG: a bool of a partial sum
    dist.all_reduce(y)
    return y.clamp(max=1)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
