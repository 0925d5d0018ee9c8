"""Dropout on a column shard with the same seed on every rank: each rank draws the mask of
its own small tensor, not its block of the full mask."""
import torch
import torch.nn.functional as F

from adv import fn_case

LABEL, CLASS = "bug", "confirm"


def single(x):
    torch.manual_seed(1234)
    return F.dropout(x, 0.5, training=True)


def distributed(rank, world, x):
    torch.manual_seed(1234)  # BUG: the same stream restarted on a shard
    return F.dropout(x, 0.5, training=True)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8)}, shard={"x": 1}, expect="Shard(1)")
