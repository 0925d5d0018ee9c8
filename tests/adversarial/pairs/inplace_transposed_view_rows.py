"""In-place ops through views on a column shard (columns [rank * n, (rank + 1) * n)): through the
transpose, on every rank's own first K columns."""
import torch

from adv import fn_case

LABEL, CLASS = "bug", "confirm"
K = 3


def single(x):
    y = x.clone()
    y[:, :K].mul_(2)
    return y


def distributed(rank, world, x):
    y = x.clone()
    y.t()[:K].mul_(2)  # BUG: rows of the transpose are columns, but local ones
    return y


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8)}, shard={"x": 1}, expect="Shard(1)")
