"""Bug: the shard is rounded to bf16 *before* it is scaled by 3 (bf16(3·bf16(y)) is not
bf16(3·y)); scaling by 2 would be exact in bf16, by 3 it is not."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "casts"


def single(x, w):
    return ((x @ w) * 3).to(torch.bfloat16).float()


def distributed(rank, world, x, w):
    y = (x @ w).to(torch.bfloat16) * 3  # BUG: rounds before the scaling
    parts = [torch.empty_like(y) for _ in range(world)]
    dist.all_gather(parts, y)
    return torch.cat(parts, dim=1).float()


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"w": 1})
