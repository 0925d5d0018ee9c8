"""Trap: bool of the reduced sum, turned back into float."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "casts"


def single(x, w):
    return (x @ w > 0).to(torch.float32)


def distributed(rank, world, x, w):
    y = x @ w
    dist.all_reduce(y)
    return (y > 0).to(torch.float32)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
