"""Trap: dropout of a replicated activation with the same seed on every rank draws the
single-device mask exactly."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x, w):
    torch.manual_seed(1234)
    return F.dropout(x @ w, 0.5, training=True)


def distributed(rank, world, x, w):
    y = x @ w
    dist.all_reduce(y)
    torch.manual_seed(1234)
    return F.dropout(y, 0.5, training=True)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 6)}, shard={"x": 1, "w": 0})
