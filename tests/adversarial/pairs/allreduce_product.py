"""Trap: a product over a sharded dim as the product of the ranks' local products (all_reduce PRODUCT)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "collectives"


def single(x):
    return x.prod(1)


def distributed(rank, world, x):
    p = x.prod(1)
    dist.all_reduce(p, op=dist.ReduceOp.PRODUCT)
    return p


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.rand(3, 8) + 0.5}, shard={"x": 1})
