"""Vocab-parallel embedding: each rank owns V / world rows, looks up the ids in its range (mask `(ids
>= lo) & (ids <= hi)`), zeroes the rest and the ranks all-reduce. Bug: id hi is also looked up
(clamped to the last row) by the rank below it."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from adv import fn_case

LABEL, CLASS = "bug", "relations"
BUG_OP = "aten.embedding"  # where shardproof must find it
V = 8


def single(ids, table):
    return F.embedding(ids, table)


def distributed(rank, world, ids, table):
    n = table.shape[0]
    lo, hi = rank * n, (rank + 1) * n
    inside = (ids >= lo) & (ids <= hi)
    local = torch.where(inside, ids - lo, torch.zeros_like(ids)).clamp(0, n - 1)
    out = F.embedding(local, table) * inside.unsqueeze(-1)
    dist.all_reduce(out)
    return out


def case(world_size=2):
    return fn_case(single, distributed, {"ids": torch.arange(V).repeat(3)[torch.randperm(3 * V)],
                                         "table": torch.randn(V, 4)}, shard={"table": 0})
