"""Per-rank sums of scaled token ids cast to int32 for the all_reduce where the
single-device sum is int64: the sums overflow int32 (a cast the values do not fit)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "casts"


def single(ids):
    return (ids * 1000).sum()


def distributed(rank, world, ids):
    s = (ids * 1000).sum().to(torch.int32)  # BUG: the global sum needs int64
    dist.all_reduce(s)
    return s.to(torch.int64)


def case(world_size=2):
    return fn_case(single, distributed, {"ids": torch.randint(1_000_000, 1_500_000, (3000,))}, shard={"ids": 0})
