"""In-place ops through views on a column shard (columns [rank * n, (rank + 1) * n)): every rank
doubles its own first K columns."""
import torch

from adv import fn_case

LABEL, CLASS = "bug", "confirm"
BUG_OP = "aten.mul"  # where shardproof must find it
K = 3


def single(x):
    y = x.clone()
    y[:, :K].mul_(2)
    return y


def distributed(rank, world, x):
    y = x.clone()
    y[:, :K].mul_(2)  # BUG: local columns :K on every rank
    return y


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8)}, shard={"x": 1}, expect="Shard(1)")
