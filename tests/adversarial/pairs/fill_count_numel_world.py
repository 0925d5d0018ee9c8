"""A sequence-parallel mean loss: the squared activations summed over ranks, divided by
the token count `(x.numel() * world)`. Correct."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "relations"


def single(x):
    return (x ** 2).sum() / (1 - torch.zeros(x.shape[0], x.shape[1])).sum()


def distributed(rank, world, x):
    total = (x ** 2).sum()
    dist.all_reduce(total)
    return total / (x.numel() * world)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 8)}, shard={"x": 1})
