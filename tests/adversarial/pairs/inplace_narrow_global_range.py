"""In-place ops through views on a column shard (columns [rank * n, (rank + 1) * n)): the global range
:K intersected with the rank's columns, through narrow."""
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
    lo, hi = max(0, -rank * y.shape[1]), min(y.shape[1], K - rank * y.shape[1])
    if hi > lo:
        y.narrow(1, lo, hi - lo).mul_(2)
    return y


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 8)}, shard={"x": 1}, expect="Shard(1)")
