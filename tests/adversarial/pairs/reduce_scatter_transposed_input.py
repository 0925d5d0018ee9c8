"""Trap: reduce_scatter of a transposed partial result made contiguous first; the scattered
rows are columns of the single-device product."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "collectives"


def single(x, w):
    return (x @ w).t()


def distributed(rank, world, x, w):
    y = (x @ w).t().contiguous()
    out = torch.empty(y.shape[0] // world, y.shape[1])
    dist.reduce_scatter_tensor(out, y)
    return out


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 8), "w": torch.randn(8, 4)}, shard={"x": 1, "w": 0},
                   expect="Shard(0)")
