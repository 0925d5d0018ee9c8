"""Bug (VERDICT, "missing all_reduce, dataflow broken"): the row-parallel fc2 output is meant to
be all-reduced into a fresh output buffer, but the collective that fills it was deleted; the
layer returns the *uninitialized* buffer (``torch.empty_like``) plus the bias. Unlike the
dataflow-intact variant (bugs/missing_allreduce), the partial sum is computed and dropped.
Expected finding: the bias add that reads the never-written buffer, on every rank (the first
tensor that differs), classed broken-dataflow."""
import torch
import torch.nn.functional as F

from shardproof import Case
from tp_mlp import HIDDEN, MLP, ParallelMLP

WORLD_SIZES = (2, 4)


class BrokenDataflow(ParallelMLP):
    def forward(self, x):
        h = F.gelu(self.fc1(x))
        partial = F.linear(h, self.fc2.weight)
        out = torch.empty_like(partial)
        # BUG: dist.all_reduce(partial); out.copy_(partial) was removed: `out` is never written
        return out + self.fc2.bias


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = MLP()
    return Case(single=full, distributed=lambda rank, world: BrokenDataflow(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size,
                name="missing_allreduce_broken_dataflow",
                meta={"source": "VERDICT: missing forward all_reduce (dataflow broken)",
                      "bug_op": "aten.add", "bug_node": "add", "bug_ranks": "all",
                      "bug": "broken-dataflow",
                      "hint": r"never written", "bug_line": "out + self.fc2.bias"})
