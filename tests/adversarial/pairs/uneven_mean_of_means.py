"""A batch mean over an uneven split (5 rows: 3 on rank 0, 2 on rank 1) as the mean of the
ranks' means."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "relations"
BUG_OP = "aten.mean"  # where shardproof must find it


def single(x):
    return x.mean(0)


def distributed(rank, world, x):
    m = x.mean(0)
    dist.all_reduce(m)
    return m / world  # BUG: the ranks hold 3 and 2 rows


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(5, 4)}, shard={"x": 0})
