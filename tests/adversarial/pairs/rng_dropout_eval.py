"""Trap: dropout with training=False on a column shard is the identity, whatever the seeds."""
import torch
import torch.nn.functional as F

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x):
    return F.dropout(x, 0.5, training=False) * 2


def distributed(rank, world, x):
    torch.manual_seed(rank)
    return F.dropout(x, 0.5, training=False) * 2


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8)}, shard={"x": 1}, expect="Shard(1)")
