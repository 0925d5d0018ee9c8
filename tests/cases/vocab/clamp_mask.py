"""torchtitan's vocab-parallel embedding (``torchtitan/models/common/embedding.py``): rank r
owns rows [lo, lo + n) of the table (blocks of ceil(V / world) rows, the last one shorter),
clamps the shifted ids into its block, looks them up locally, multiplies the lookup by the
in-block mask ``(ids >= lo) & (ids < lo + n)`` cast to the lookup's dtype, and an all-reduce
sums the ranks' pieces into the single device's ``F.embedding(ids, W)``.

Buggy twin (``bug=True``): the block's upper bound off by one (``ids < lo + n + 1``): the
first id of the next block is kept too, looked up at the clamped last row, so its row gets
this rank's last row added."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case

VOCAB, DIM = 15, 4  # not a multiple of the world size: the last block is shorter


def chunk(world: int) -> int:
    return (VOCAB + world - 1) // world


def single(ids, weight):
    return {"out": F.embedding(ids, weight)}


def distributed(rank, world, bug=False):
    def program(ids, weight):
        offset = rank * chunk(world)
        rows = weight.shape[0]
        mask = (ids >= offset) & (ids < offset + rows + (1 if bug else 0))
        local = (ids - offset).clamp(0, rows - 1)
        out = F.embedding(local, weight)
        out = out * mask.unsqueeze(-1).to(out.dtype)
        dist.all_reduce(out)
        return {"out": out}
    return program


def shard(rank, world, inputs):
    c = chunk(world)
    return dict(inputs, weight=inputs["weight"][rank * c:(rank + 1) * c])


def case(world_size: int = 2, bug: bool = False) -> Case:
    g = torch.Generator().manual_seed(0)
    ids = torch.cat([torch.arange(VOCAB), torch.arange(VOCAB).flip(0)]).reshape(3, 10)  # every id, block ends too
    inputs = {"ids": ids, "weight": torch.randn(VOCAB, DIM, generator=g)}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, bug), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name="vocab_clamp_mask" + ("_bug" if bug else ""),
                expect={"out": "Replicate()"})
