"""Same math (issue 15, form 2): the vocab-parallel embedding with its out-of-range mask
written ``~((ids >= lo) & (ids < hi))`` (De Morgan) instead of ``(ids < lo) | (ids >= hi)``.

Buggy twin (``bug=True``): a wrong comparison, ``ids > lo`` for ``ids >= lo``: the first id
of every rank's range is masked out, so that token's row is zero everywhere."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case

VOCAB, DIM = 16, 4


def single(ids, weight):
    return {"out": F.embedding(ids, weight)}


def distributed(rank, world, bug=False):
    def program(ids, weight):
        per = VOCAB // world
        lo, hi = rank * per, (rank + 1) * per
        inside = ((ids > lo) if bug else (ids >= lo)) & (ids < hi)
        outside = ~inside
        local = ids - lo
        local[outside] = 0
        out = F.embedding(local, weight)
        out[outside, :] = 0.0
        dist.all_reduce(out)
        return {"out": out}
    return program


def shard(rank, world, inputs):
    per = VOCAB // world
    return dict(inputs, weight=inputs["weight"][rank * per:(rank + 1) * per])


def case(world_size: int = 2, bug: bool = False) -> Case:
    g = torch.Generator().manual_seed(0)
    ids = torch.arange(VOCAB).reshape(2, VOCAB // 2)  # every id, the range ends included
    inputs = {"ids": ids, "weight": torch.randn(VOCAB, DIM, generator=g)}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, bug), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name="same_math_demorgan" + ("_bug" if bug else ""),
                expect={"out": "Replicate()"})
