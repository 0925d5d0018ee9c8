"""Feature-sharded affine normalisation: a LayerNorm over the full features computed on
the replicated input, then each rank applies its block of the LayerNorm's weight and bias
(default ones and zeros) to its feature shard, loaded as `rank`. Correct."""
import torch
import torch.nn.functional as F
from torch import nn

from shardproof import Case

LABEL, CLASS = "ok", "relations"
D = 8


class Full(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)

    def forward(self, x):
        return self.norm(x)


class Sharded(nn.Module):
    def __init__(self, full, rank, world):
        super().__init__()
        self.rank, self.world = rank, world
        self.weight = nn.Parameter(full.norm.weight.detach().chunk(world)[rank].clone())
        self.bias = nn.Parameter(full.norm.bias.detach().chunk(world)[rank].clone())

    def forward(self, x):
        h = F.layer_norm(x, (D,))
        return h.chunk(self.world, -1)[self.rank] * self.weight + self.bias


def case(world_size=2):
    full = Full()
    return Case(single=full, distributed=lambda rank, world: Sharded(full, rank, world),
                inputs={"x": torch.randn(3, D)}, world_size=world_size, expect={"out": "Shard(1)"})
