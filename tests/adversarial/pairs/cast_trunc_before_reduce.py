"""Row-parallel matmul whose partial sums are truncated to int64 before the all_reduce:
the sum of truncations is not the truncation of the sum."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "casts"


def single(x, w):
    return (x @ w).to(torch.int64)


def distributed(rank, world, x, w):
    y = (x @ w).to(torch.int64)  # BUG: cast of a partial sum
    dist.all_reduce(y)
    return y


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
