"""Ranks 1 and 2 each hold a row block of x*2 and gather it in subgroup {1, 2} to
`dst=2`, which broadcasts the whole back from global rank 2. Correct."""
import torch
import torch.distributed as dist

from adv import block, fn_case, subgroups

LABEL, CLASS = "ok", "collectives"
WORLD = 4
DST = 2


def single(x):
    return x * 2


def distributed(rank, world, x):
    (g,) = subgroups([1, 2])
    if rank in (0, 3):
        return x * 2
    mine = block(x, 0, rank - 1, 2) * 2
    bucket = [torch.zeros_like(mine) for _ in range(2)] if rank == DST else None
    dist.gather(mine, bucket, dst=DST, group=g)
    full = torch.cat(bucket) if rank == DST else torch.zeros_like(x)
    dist.broadcast(full, src=2, group=g)
    return full


def case(world_size=4):
    return fn_case(single, distributed, {"x": torch.randn(4, 3)}, world=world_size)
