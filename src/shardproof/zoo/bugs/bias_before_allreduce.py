"""Bug: the row-parallel fc2 applies its (replicated) bias before the all_reduce, so the
bias is summed world_size times. Expected finding: the fc2 addmm (where the replicated bias
is added to the partial product), on every rank."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case
from tp_mlp import HIDDEN, MLP, ParallelMLP

WORLD_SIZES = (2, 4)


class BiasBeforeAllReduce(ParallelMLP):
    def forward(self, x):
        h = F.gelu(self.fc1(x))
        y = self.fc2(h)  # BUG: F.linear with the bias on each rank; the bias is then summed N times
        dist.all_reduce(y)
        return y


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = MLP()
    return Case(single=full, distributed=lambda rank, world: BiasBeforeAllReduce(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="bias_before_allreduce",
                meta={"source": "gpt-neox #905 class",
                      "bug_op": "aten.addmm", "bug_node": "addmm_1", "bug_ranks": "all",
                      "bug": "partial-sum-never-reduced",
                      "hint": r"bias.*all_reduce"})
