"""A keepdim mean over an uneven sequence split (3 and 2 rows), averaged over ranks and
broadcast back over the local rows."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "relations"


def single(x):
    return x - x.mean(0, keepdim=True)


def distributed(rank, world, x):
    m = x.mean(0, keepdim=True)
    dist.all_reduce(m)
    return x - m / world  # BUG: ranks hold 3 and 2 rows


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(5, 4)}, shard={"x": 0}, expect="Shard(0)")
