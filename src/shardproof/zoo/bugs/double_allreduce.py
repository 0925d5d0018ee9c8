"""Bug: the row-parallel fc2 output is all-reduced twice (a duplicated all_reduce in forward),
so every rank returns world_size times the correct sum. Expected finding: the second
all_reduce, on every rank (its input is already replicated, so summing it multiplies by N)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case
from tp_mlp import HIDDEN, MLP, ParallelMLP

WORLD_SIZES = (2, 4)


class DoubleAllReduce(ParallelMLP):
    def forward(self, x):
        h = F.gelu(self.fc1(x))
        y = F.linear(h, self.fc2.weight)
        dist.all_reduce(y)
        dist.all_reduce(y)  # BUG: y is already the full sum; reducing again multiplies it by world_size
        return y + self.fc2.bias


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = MLP()
    return Case(single=full, distributed=lambda rank, world: DoubleAllReduce(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="double_allreduce",
                meta={"source": "VERDICT: reduced twice",
                      "bug_op": "_c10d_functional.all_reduce", "bug_node": "all_reduce_1", "bug_ranks": "all",
                      "bug": "reduced-twice",
                      "hint": r"remove the extra all_reduce"})
