"""A statistic computed on one rank and broadcast: rank 0 computes the RMS scale of the
replicated input (the others hold a placeholder), broadcasts it, and every rank applies
it before its column-parallel projection. Exercises a rooted collective (the mutation
operator ``root-rank`` applies).

    shardproof verify src/shardproof/zoo/broadcast_from_owner.py --world-size 4
"""
import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case

HIDDEN, OUT = 8, 16
WORLD_SIZES = (2, 4)
OWNER = 0


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(HIDDEN, OUT, bias=False)

    def forward(self, x):
        return self.proj(x * x.pow(2).mean().rsqrt())


class ScaledColumnParallel(nn.Module):
    def __init__(self, full: Scaled, rank: int, world: int):
        super().__init__()
        self.rank = rank
        self.weight = nn.Parameter(full.proj.weight.detach().chunk(world, 0)[rank].clone())

    def forward(self, x):
        scale = x.pow(2).mean().rsqrt() if self.rank == OWNER else torch.ones(())
        dist.broadcast(scale, src=OWNER)
        return (x * scale) @ self.weight.t()


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Scaled()
    return Case(single=full, distributed=lambda rank, world: ScaledColumnParallel(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="broadcast_from_owner",
                meta={"source": "a statistic computed on one rank and broadcast"}, expect={"out": "Shard(1)"})
