"""In-place ops through views on a column shard (columns [rank * n, (rank + 1) * n)): columns :K live
on rank 0 only (K < n), so only rank 0 doubles them."""
import torch

from adv import fn_case

LABEL, CLASS = "ok", "confirm"
K = 3


def single(x):
    y = x.clone()
    y[:, :K].mul_(2)
    return y


def distributed(rank, world, x):
    y = x.clone()
    if rank == 0:
        y[:, :K].mul_(2)
    return y


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8)}, shard={"x": 1}, expect="Shard(1)")
