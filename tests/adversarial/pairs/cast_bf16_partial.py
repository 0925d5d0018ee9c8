"""Partial sums rounded to bf16 before the reduction: bf16(a) + bf16(b) is not bf16(a + b)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "casts"


def single(x, w):
    return (x @ w).to(torch.bfloat16).float()


def distributed(rank, world, x, w):
    y = (x @ w).to(torch.bfloat16).float()  # BUG: rounds each partial sum
    dist.all_reduce(y)
    return y.to(torch.bfloat16).float()


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(8, 16) * 3, "w": torch.randn(16, 8)},
                   shard={"x": 1, "w": 0})
