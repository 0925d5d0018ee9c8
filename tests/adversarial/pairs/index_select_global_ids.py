"""index_select on a column shard with the global ids taken modulo the shard width and no
ownership mask: every rank contributes a column to each pick."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "relations"
BUG_OP = "aten.index_select"  # where shardproof must find it
IDS = torch.tensor([1, 5, 6])


def single(x):
    return x.index_select(1, IDS)


def distributed(rank, world, x):
    picked = x.index_select(1, IDS % x.shape[1])  # BUG: no mask of the ids this rank owns
    dist.all_reduce(picked)
    return picked


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 8)}, shard={"x": 1})
