"""The partial sum written into columns 1:3 of a buffer and all-reduced through that
non-contiguous view: gloo reduces a flat copy and never writes it back."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "collectives"


def single(x, w):
    out = torch.zeros(4, 5)
    out[:, 1:3] = x @ w
    return out


def distributed(rank, world, x, w):
    buf = torch.zeros(4, 5)
    buf[:, 1:3].copy_(x @ w)
    dist.all_reduce(buf[:, 1:3])  # BUG: not contiguous
    return buf


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 2)}, shard={"x": 1, "w": 0})
