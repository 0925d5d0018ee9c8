"""Trap: vocab-parallel top-2: each rank's local top-2 values, all-gathered, then the top-2 of those."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x):
    return x.topk(2, -1).values


def distributed(rank, world, x):
    local = x.topk(2, -1).values
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local)
    return torch.cat(parts, -1).topk(2, -1).values


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 8)}, shard={"x": 1})
