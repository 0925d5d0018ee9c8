"""Broadcast in subgroup {1, 2} from the owner, global rank 2, written as src=1 (its rank
in the group): src is a global rank, so rank 1's zeros are broadcast."""
import torch
import torch.distributed as dist

from adv import fn_case, subgroups

LABEL, CLASS = "bug", "collectives"
WORLD = 4


def single(x):
    return x * 2


def distributed(rank, world, x):
    (g,) = subgroups([1, 2])
    t = x * 2 if rank != 1 else torch.zeros_like(x)
    if rank in (1, 2):
        dist.broadcast(t, src=1, group=g)  # BUG: the owner is global rank 2
    return t


def case(world_size=4):
    return fn_case(single, distributed, {"x": torch.randn(3, 4)}, world=world_size)
