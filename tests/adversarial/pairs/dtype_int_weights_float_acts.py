"""Trap: int8 weights (as a quantized checkpoint stores them) cast to float on the
rank's column shard, times a float scale."""
import torch

from adv import fn_case

LABEL, CLASS = "ok", "casts"


def single(x, q, s):
    return x @ (q.float() * s)


def distributed(rank, world, x, q, s):
    return x @ (q.to(x.dtype) * s)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 4), "q": torch.randint(-128, 128, (4, 8),
                                         dtype=torch.int8), "s": torch.rand(8)}, shard={"q": 1, "s": 0},
                   expect="Shard(1)")
