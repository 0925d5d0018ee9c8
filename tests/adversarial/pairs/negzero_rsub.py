"""bug: 0 - t instead of -t: equal in real arithmetic, but where t is +0.0 the reciprocal
is +inf instead of -inf."""
import torch
from adv import fn_case


LABEL, CLASS = "bug", "casts"


def single(x, m):
    return 1.0 / (-(x * m))


def distributed(rank, world, x, m):
    return 1.0 / (0.0 - x * m)


def case(world_size=2):
    m = (torch.arange(32).reshape(8, 4) % 3 != 0).float()
    return fn_case(single, distributed, {"x": torch.rand(8, 4) + 1, "m": m}, shard={"x": 0, "m": 0}, expect="Shard(0)")
