"""ok: reduced row-parallel products and their reciprocals through a relu (+inf where a
product is not positive): the same infinities on every rank as on the single device."""
import torch
import torch.distributed as dist
from adv import fn_case


LABEL, CLASS = "ok", "casts"


def single(x, w):
    y = x @ w
    return {"out": y, "r": 1.0 / torch.relu(y)}


def distributed(rank, world, x, w):
    y = x @ w
    dist.all_reduce(y)
    return {"out": y, "r": 1.0 / torch.relu(y)}


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 3)}, shard={"x": 1, "w": 0},
                   expect={"out": "Replicate()", "r": "Replicate()"})
