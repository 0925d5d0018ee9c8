"""Trap: each rank rounds its column shard of x @ w to bf16, then the shards are gathered.
Rounding is elementwise, so it commutes with the sharding: the same values as rounding the
whole product (the narrowing cast is exact as a term, never an identity)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "casts"


def single(x, w):
    return (x @ w).to(torch.bfloat16).float()


def distributed(rank, world, x, w):
    y = (x @ w).to(torch.bfloat16)
    parts = [torch.empty_like(y) for _ in range(world)]
    dist.all_gather(parts, y)
    return torch.cat(parts, dim=1).float()


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"w": 1})
