"""Megatron-style tensor-parallel MLP: column-parallel fc1, GELU, row-parallel fc2, all_reduce.

    shardproof verify src/shardproof/zoo/tp_mlp.py --world-size 4
"""
import torch
from torch import nn
import torch.nn.functional as F

from shardproof import Case
from tensor_parallel import TensorParallel

HIDDEN, FFN = 16, 48
WORLD_SIZES = (2, 3, 4, 6, 8)


class MLP(nn.Module):
    def __init__(self, hidden=HIDDEN, ffn=FFN):
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class ParallelMLP(TensorParallel):
    """Rank r holds rows r of fc1 (column parallel) and columns r of fc2 (row parallel)."""

    def __init__(self, full: MLP, rank: int, world: int):
        super().__init__()
        self.fc1 = nn.Linear(HIDDEN, FFN // world)
        self.fc2 = nn.Linear(FFN // world, HIDDEN)
        with torch.no_grad():
            self.fc1.weight.copy_(full.fc1.weight.chunk(world, 0)[rank])
            self.fc1.bias.copy_(full.fc1.bias.chunk(world, 0)[rank])
            self.fc2.weight.copy_(full.fc2.weight.chunk(world, 1)[rank])
            self.fc2.bias.copy_(full.fc2.bias)

    def forward(self, x):
        h = F.gelu(self.fc1(self.enter_tp(x)))
        y = self.reduce_tp(F.linear(h, self.fc2.weight))
        return y + self.fc2.bias


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = MLP()
    return Case(single=full, distributed=lambda rank, world: ParallelMLP(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="tp_mlp",
                meta={"source": "Megatron-LM TP MLP"},
                expect={"out": "Replicate()"})
