"""Rank 1 computes two columns and broadcasts them into columns 1:3 of everyone's buffer,
through a non-contiguous view: gloo broadcasts a contiguous copy and never writes it back."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "collectives"


def single(x):
    out = torch.zeros(4, 5)
    out[:, 1:3] = x.exp()
    return out


def distributed(rank, world, x):
    buf = torch.zeros(4, 5)
    if rank == 1:
        buf[:, 1:3] = x.exp()
    dist.broadcast(buf[:, 1:3], src=1)  # BUG: not contiguous
    return buf


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 2)})
