"""Trap: the same per-rank max, with each rank's sum rescaled to the global max (online softmax)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x):
    return x.softmax(-1)


def distributed(rank, world, x):
    m = x.max(-1, keepdim=True).values
    g = m.clone()
    dist.all_reduce(g, op=dist.ReduceOp.MAX)
    e = (x - m).exp()
    z = e.sum(-1, keepdim=True) * (m - g).exp()
    dist.all_reduce(z)
    return e * (m - g).exp() / z


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 8) * 3}, shard={"x": 1}, expect="Shard(1)")
