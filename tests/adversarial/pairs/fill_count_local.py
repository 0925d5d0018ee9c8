"""A sequence-parallel mean loss: the squared activations summed over ranks, divided by the token count
`(1 - torch.zeros(x.shape[0], x.shape[1])).sum()`. Bug: the local count (this rank's tokens only)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "relations"


def single(x):
    return (x ** 2).sum() / (1 - torch.zeros(x.shape[0], x.shape[1])).sum()


def distributed(rank, world, x):
    total = (x ** 2).sum()
    dist.all_reduce(total)
    return total / (1 - torch.zeros(x.shape[0], x.shape[1])).sum()


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 8)}, shard={"x": 1})
