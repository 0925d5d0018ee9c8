"""bug: 0 - t instead of -t feeds a reciprocal then a sigmoid: sigmoid(1/+0.0) is 1 where
sigmoid(1/-0.0) is 0 (finite values differ); a second output holds infinities."""
import torch
from adv import fn_case


LABEL, CLASS = "bug", "casts"


def single(x, m):
    return {"out": torch.sigmoid(1.0 / (-(x * m))), "r": 1.0 / (x * m)}


def distributed(rank, world, x, m):
    return {"out": torch.sigmoid(1.0 / (0.0 - x * m)), "r": 1.0 / (x * m)}


def case(world_size=2):
    m = (torch.arange(32).reshape(8, 4) % 3 != 0).float()
    return fn_case(single, distributed, {"x": torch.rand(8, 4) + 1, "m": m}, shard={"x": 0, "m": 0},
                   expect={"out": "Shard(0)", "r": "Shard(0)"})
