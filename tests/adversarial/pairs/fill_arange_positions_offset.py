"""Trap: position ids of a sequence shard, arange offset by the rank's start."""
import torch

from adv import fn_case

LABEL, CLASS = "ok", "relations"


def single(x):
    pos = torch.arange(x.shape[1], dtype=torch.float32)
    return x * torch.cos(pos)


def distributed(rank, world, x):
    n = x.shape[1]
    pos = torch.arange(rank * n, (rank + 1) * n, dtype=torch.float32)
    return x * torch.cos(pos)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(2, 8)}, shard={"x": 1}, expect="Shard(1)")
