"""Trap: an all-gather written as narrow().copy_() into a zero buffer followed by an all_reduce."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x):
    return x.sigmoid()


def distributed(rank, world, x):
    n = x.shape[1]
    buf = torch.zeros(x.shape[0], n * world)
    buf.narrow(1, rank * n, n).copy_(x.sigmoid())
    dist.all_reduce(buf)
    return buf


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 8)}, shard={"x": 1})
