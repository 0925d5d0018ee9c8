"""Row-parallel partial sums; Trap: a second name for the tensor taken before the in-place all_reduce sees the reduced values (it is the same tensor)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x, w):
    y = x @ w
    return 2 * y


def distributed(rank, world, x, w):
    y = x @ w
    z = y
    dist.all_reduce(y)
    return z + y


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
