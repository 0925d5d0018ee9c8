"""Trap: bf16 of partial sums of small integers is exact, so rounding each partial is harmless."""
import torch
import torch.distributed as dist

from adv import fn_case, ints

LABEL, CLASS = "ok", "casts"


def single(x, w):
    return (x @ w).to(torch.bfloat16).float()


def distributed(rank, world, x, w):
    y = (x @ w).to(torch.bfloat16).float()
    dist.all_reduce(y)
    return y


def case(world_size=2):
    return fn_case(single, distributed, {"x": ints(4, 4, high=3), "w": ints(4, 4, high=3)}, shard={"x": 1, "w": 0})
