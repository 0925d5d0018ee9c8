"""Position ids of a sequence shard built with arange of the local length (no rank offset)."""
import torch

from adv import fn_case

LABEL, CLASS = "bug", "relations"
BUG_OP = "aten.mul"  # where shardproof must find it


def single(x):
    pos = torch.arange(x.shape[1], dtype=torch.float32)
    return x * torch.cos(pos)


def distributed(rank, world, x):
    pos = torch.arange(x.shape[1], dtype=torch.float32)  # BUG: starts at 0 on every rank
    return x * torch.cos(pos)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(2, 8)}, shard={"x": 1}, expect="Shard(1)")
