"""A reduced row statistic repeated over the local feature extent and summed (repeat, not
expand: a materialised copy with the local count)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "relations"


def single(x, w):
    y = (x @ w).sum(-1, keepdim=True)
    return y.repeat(1, 8).sum(-1)


def distributed(rank, world, x, w):
    y = (x @ w).sum(-1, keepdim=True)
    dist.all_reduce(y)
    return y.repeat(1, w.shape[1]).sum(-1)  # BUG: the local width


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 6), "w": torch.randn(6, 8)}, shard={"w": 1})
