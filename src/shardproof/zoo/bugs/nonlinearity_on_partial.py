"""Bug: a second GELU (the "activation after the output projection" variant of the MLP) is
applied to the row-parallel fc2 output before the all_reduce, i.e. to a partial sum:
gelu(a) + gelu(b) != gelu(a + b). Expected finding: the gelu after fc2, on every rank."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case
from tp_mlp import HIDDEN, MLP, ParallelMLP

WORLD_SIZES = (2, 4)


class GatedOutMLP(MLP):
    """MLP variant with an activation on the output projection as well."""

    def forward(self, x):
        return F.gelu(self.fc2(F.gelu(self.fc1(x))))


class NonlinearityOnPartial(ParallelMLP):
    def forward(self, x):
        h = F.gelu(self.fc1(x))
        y = F.linear(h, self.fc2.weight)
        y = F.gelu(y)  # BUG: gelu of a partial sum; it must come after all_reduce and the bias add
        dist.all_reduce(y)
        return y + self.fc2.bias


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = GatedOutMLP()
    return Case(single=full, distributed=lambda rank, world: NonlinearityOnPartial(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="nonlinearity_on_partial",
                meta={"source": "PyTorch PR 165962 class",
                      "bug_op": "aten.gelu", "bug_node": "gelu_1", "bug_ranks": "all",
                      "bug": "nonlinearity-on-partial",
                      "hint": r"all_reduce.*before the gelu"})
