"""Rank 1 computes the value; everyone broadcasts from rank 0 (the default owner habit)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "collectives"


def single(x):
    return x.exp()


def distributed(rank, world, x):
    t = x.exp() if rank == 1 else torch.zeros_like(x)
    dist.broadcast(t, src=0)  # BUG: the owner is rank 1
    return t


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 4)})
