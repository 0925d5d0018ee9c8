"""Row-parallel linear (bias / world added on each rank) that loads the
wrong weight half on rank 1: every rank takes block 0."""
import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case

LABEL, CLASS = "bug", "relations"


class Row(nn.Module):
    def __init__(self, full, rank, world):
        super().__init__()
        self.world = world
        self.weight = nn.Parameter(full.weight.detach().chunk(world, 1)[0].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())

    def forward(self, input):
        y = input @ self.weight.t() + self.bias / self.world
        dist.all_reduce(y)
        return y


def case(world_size=2):
    full = nn.Linear(8, 6)
    return Case(single=full, distributed=lambda rank, world: Row(full, rank, world),
                inputs={"input": torch.randn(4, 8)}, dist_inputs=lambda r, w, i: {"input": i["input"].chunk(w, 1)[r]},
                world_size=world_size, expect={"out": "Replicate()"})
