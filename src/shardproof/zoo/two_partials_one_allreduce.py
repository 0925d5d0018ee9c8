"""Two row-parallel branches (a GPT-J / PaLM style parallel block: an MLP branch and a gated
branch reading the same input) whose partial sums are added *before* a single all_reduce.
all_reduce is linear, so all_reduce(a + b) = all_reduce(a) + all_reduce(b): one collective is
enough. A checker that demands every partial sum be reduced before any other op rejects this
correct program; shardproof must verify it.

    shardproof verify src/shardproof/zoo/two_partials_one_allreduce.py --world-size 4
"""
import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F

from shardproof import Case

HIDDEN, FFN = 16, 32
WORLD_SIZES = (2, 4)


class TwoBranches(nn.Module):
    def __init__(self, hidden=HIDDEN, ffn=FFN):
        super().__init__()
        self.up = nn.Linear(hidden, ffn)
        self.down = nn.Linear(ffn, hidden)
        self.gate = nn.Linear(hidden, ffn)
        self.proj = nn.Linear(ffn, hidden)

    def forward(self, x):
        return self.down(F.gelu(self.up(x))) + self.proj(torch.sigmoid(self.gate(x)))


class ParallelTwoBranches(nn.Module):
    """Both branches column-parallel then row-parallel; one all_reduce of their summed partials."""

    def __init__(self, full: TwoBranches, rank: int, world: int):
        super().__init__()
        with torch.no_grad():
            for name in ("up", "gate"):
                layer = getattr(full, name)
                setattr(self, name, nn.Linear(HIDDEN, FFN // world))
                getattr(self, name).weight.copy_(layer.weight.chunk(world, 0)[rank])
                getattr(self, name).bias.copy_(layer.bias.chunk(world, 0)[rank])
            for name in ("down", "proj"):
                layer = getattr(full, name)
                setattr(self, name, nn.Linear(FFN // world, HIDDEN))
                getattr(self, name).weight.copy_(layer.weight.chunk(world, 1)[rank])
                getattr(self, name).bias.copy_(layer.bias)

    def forward(self, x):
        a = F.linear(F.gelu(self.up(x)), self.down.weight)  # partial sum
        b = F.linear(torch.sigmoid(self.gate(x)), self.proj.weight)  # partial sum
        y = a + b  # still a partial sum of the total
        dist.all_reduce(y)
        return y + self.down.bias + self.proj.bias  # the biases once, after the reduction


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = TwoBranches()
    return Case(single=full, distributed=lambda rank, world: ParallelTwoBranches(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="two_partials_one_allreduce",
                meta={"source": "issue 7: correct programs naive checkers reject (sum of partials, one all_reduce)"},
                expect={"out": "Replicate()"})
