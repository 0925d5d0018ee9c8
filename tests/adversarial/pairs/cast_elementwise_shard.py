"""Trap: an int cast of a sequence-sharded activation is elementwise, so it commutes with the shard."""
import torch

from adv import fn_case

LABEL, CLASS = "ok", "casts"


def single(x):
    return (x * 4).long() // 3


def distributed(rank, world, x):
    return (x * 4).long() // 3


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(6, 5)}, shard={"x": 0}, expect="Shard(0)")
