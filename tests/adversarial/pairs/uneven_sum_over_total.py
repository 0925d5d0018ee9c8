"""Trap: the same uneven batch mean as the summed rows over the summed row counts."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "relations"


def single(x):
    return x.mean(0)


def distributed(rank, world, x):
    s = torch.cat([x.sum(0), torch.tensor([float(x.shape[0])])])
    dist.all_reduce(s)
    return s[:-1] / s[-1]


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(5, 4)}, shard={"x": 0})
