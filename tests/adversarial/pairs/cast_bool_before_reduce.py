"""Row-parallel integer-valued scores cast to bool per rank ("is my partial nonzero") and
the flags summed: partials that cancel (1 + -1) are nonzero, their sum is not."""
import torch
import torch.distributed as dist

from adv import fn_case, ints

LABEL, CLASS = "bug", "casts"


def single(x, w):
    return (x @ w).bool().float()


def distributed(rank, world, x, w):
    y = (x @ w).bool().float()  # BUG: a bool of a partial sum
    dist.all_reduce(y)
    return y.clamp(max=1)


def case(world_size=2):
    return fn_case(single, distributed, {"x": ints(8, 4, high=1), "w": ints(4, 8, high=1)}, shard={"x": 1, "w": 0})
