"""bug: each rank's partial sum is offset by a large replicated input c before the all-reduce
and the offset removed after: exact in real arithmetic, but float32 loses the sums' digits."""
import torch
import torch.distributed as dist
from adv import fn_case


LABEL, CLASS = "bug", "casts"


def single(x, w, c):
    return x @ w


def distributed(rank, world, x, w, c):
    y = x @ w + c
    dist.all_reduce(y)
    return y - world * c


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 3), "c": torch.full((3,), 3e7)},
                   shard={"x": 1, "w": 0})
