"""Trap: torch.gather of per-row target columns on a column shard, with the rank offset and
a mask; the picked values are all-reduced."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "relations"


def single(x, t):
    return x.gather(1, t[:, None]).squeeze(1)


def distributed(rank, world, x, t):
    n = x.shape[1]
    local = t - rank * n
    inside = (local >= 0) & (local < n)
    v = x.gather(1, local.clamp(0, n - 1)[:, None]).squeeze(1) * inside
    dist.all_reduce(v)
    return v


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(6, 8), "t": torch.tensor([0, 3, 4, 7, 5, 1])},
                   shard={"x": 1})
