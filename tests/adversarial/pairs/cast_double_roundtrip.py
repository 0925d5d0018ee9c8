"""Trap: the partial sums reduced in float64, then cast back to float32."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "casts"


def single(x, w):
    return x @ w


def distributed(rank, world, x, w):
    y = (x @ w).double()
    dist.all_reduce(y)
    return y.float()


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
