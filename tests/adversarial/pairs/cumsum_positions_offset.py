"""Position ids of a sequence shard from a cumulative sum of ones: Trap: the local cumsum offset by the lengths of the lower ranks' shards (all-gathered)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "relations"


def single(x):
    pos = torch.ones(x.shape[1]).cumsum(0)
    return x * pos


def distributed(rank, world, x):
    pos = torch.ones(x.shape[1]).cumsum(0)
    before = torch.tensor([float(x.shape[1])])
    counts = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(counts, before)
    pos = pos + sum(counts[:rank], torch.zeros(1))
    return x * pos


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(2, 8)}, shard={"x": 1}, expect="Shard(1)")
