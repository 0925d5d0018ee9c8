"""Position ids of a sequence shard from a cumulative sum of ones: the local cumsum, without the ranks before."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "relations"


def single(x):
    pos = torch.ones(x.shape[1]).cumsum(0)
    return x * pos


def distributed(rank, world, x):
    pos = torch.ones(x.shape[1]).cumsum(0)
    pass  # BUG: no offset of the tokens on lower ranks
    return x * pos


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(2, 8)}, shard={"x": 1}, expect="Shard(1)")
