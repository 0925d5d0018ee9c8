"""ok: -1/t for 1/(-t): the same infinity where t is +0.0 (and equal elsewhere)."""
import torch
from adv import fn_case


LABEL, CLASS = "ok", "casts"


def single(x, m):
    return 1.0 / (-(x * m))


def distributed(rank, world, x, m):
    return -1.0 / (x * m)


def case(world_size=2):
    m = (torch.arange(32).reshape(8, 4) % 3 != 0).float()
    return fn_case(single, distributed, {"x": torch.rand(8, 4) + 1, "m": m}, shard={"x": 0, "m": 0}, expect="Shard(0)")
