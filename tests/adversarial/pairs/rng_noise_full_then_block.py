"""Trap: noise drawn whole from a shared seed, then each rank takes its block."""
import torch

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x):
    torch.manual_seed(7)
    return x + torch.randn(x.shape)


def distributed(rank, world, x):
    torch.manual_seed(7)
    noise = torch.randn(x.shape[0] * world, x.shape[1])
    return x + noise.chunk(world, 0)[rank]


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(6, 3)}, shard={"x": 0}, expect="Shard(0)")
