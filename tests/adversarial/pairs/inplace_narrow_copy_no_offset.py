"""An all-gather written as narrow().copy_() into a zero buffer and an all_reduce, where
every rank copies into the first block (the offset forgotten)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "confirm"


def single(x):
    return x.sigmoid()


def distributed(rank, world, x):
    n = x.shape[1]
    buf = torch.zeros(x.shape[0], n * world)
    buf.narrow(1, 0, n).copy_(x.sigmoid())  # BUG: every rank writes block 0
    dist.all_reduce(buf)
    return buf


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 8)}, shard={"x": 1})
