"""Broadcast in subgroup {1, 2} from the owner, global rank 2 (group rank 1), written as
`group_src=1`. Correct: group_src is the rank in the group."""
import torch
import torch.distributed as dist

from adv import fn_case, subgroups

LABEL, CLASS = "ok", "collectives"
WORLD = 4


def single(x):
    return x * 2


def distributed(rank, world, x):
    (g,) = subgroups([1, 2])
    t = x * 2 if rank != 1 else torch.zeros_like(x)
    if rank in (1, 2):
        dist.broadcast(t, group_src=1, group=g)
    return t


def case(world_size=4):
    return fn_case(single, distributed, {"x": torch.randn(3, 4)}, world=world_size)
