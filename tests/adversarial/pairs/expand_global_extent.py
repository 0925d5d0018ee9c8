"""A row statistic expanded over the feature dim and summed: `torch.exp(y.expand(-1, 8) / 8).sum(-1)`.
Correct."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "relations"


def single(x, w):
    y = (x @ w).sum(-1, keepdim=True)
    return torch.exp(y.expand(-1, 8) / 8).sum(-1)


def distributed(rank, world, x, w):
    y = (x @ w).sum(-1, keepdim=True)
    dist.all_reduce(y)
    return torch.exp(y.expand(-1, 8) / 8).sum(-1)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 6), "w": torch.randn(6, 8)}, shard={"w": 1})
