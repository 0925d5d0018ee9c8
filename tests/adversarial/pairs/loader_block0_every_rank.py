"""Column-parallel linear whose rank program loads its weight block as
`W.chunk(world, 0)[0]` and its bias as `b.chunk(world, 0)[0]`. Bug: every rank loads block 0."""
import torch
from torch import nn

from shardproof import Case

LABEL, CLASS = "bug", "relations"
D_IN, D_OUT = 8, 8


class Full(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(D_IN, D_OUT)
        pass

    def forward(self, x):
        return self.fc(x)


class Column(nn.Module):
    def __init__(self, full, rank, world):
        super().__init__()
        W, b = full.fc.weight.detach(), full.fc.bias.detach()
        self.weight = nn.Parameter(W.chunk(world, 0)[0].clone())
        self.bias = nn.Parameter(b.chunk(world, 0)[0].clone())

    def forward(self, x):
        return x @ self.weight.t() + self.bias


def case(world_size=2):
    full = Full()
    return Case(single=full, distributed=lambda rank, world: Column(full, rank, world),
                inputs={"x": torch.randn(4, D_IN)}, world_size=world_size, expect={"out": "Shard(1)"})
