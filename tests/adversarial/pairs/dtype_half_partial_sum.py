"""Mixed dtypes: row-parallel partial sums all-reduced in float16 after a float32 matmul
(a half-precision communication of values that overflow float16)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "casts"


def single(x, w):
    return x @ w


def distributed(rank, world, x, w):
    y = (x @ w).half()  # BUG: 1e5-scale partials overflow float16 (max 65504)
    dist.all_reduce(y)
    return y.float()


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8) * 300, "w": torch.randn(8, 4) * 300},
                   shard={"x": 1, "w": 0})
