"""Trap: the partial sum written into rows 1:3 of a larger zero buffer and all-reduced in
place through that (contiguous, offset) view."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "collectives"


def single(x, w):
    out = torch.zeros(4, 5)
    out[1:3] = x @ w
    return out


def distributed(rank, world, x, w):
    buf = torch.zeros(4, 5)
    buf[1:3].copy_(x @ w)
    dist.all_reduce(buf[1:3])
    return buf


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(2, 8), "w": torch.randn(8, 5)}, shard={"x": 1, "w": 0})
