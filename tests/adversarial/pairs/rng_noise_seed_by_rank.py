"""Noise for a sequence shard drawn with seed + rank: not the single-device noise."""
import torch

from adv import fn_case

LABEL, CLASS = "bug", "confirm"


def single(x):
    torch.manual_seed(7)
    return x + torch.randn(x.shape)


def distributed(rank, world, x):
    torch.manual_seed(7 + rank)  # BUG
    return x + torch.randn(x.shape)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(6, 3)}, shard={"x": 0}, expect="Shard(0)")
