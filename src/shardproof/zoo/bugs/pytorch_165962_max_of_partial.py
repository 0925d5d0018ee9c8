"""Bug (PyTorch PR 165962, "fix for DTensor ops with Partial placements"): a reduction applied to
a Partial (unreduced) tensor before the pending sum. Here the row-parallel projection's output
is a partial sum and the row max (as in a logit soft-cap or a norm-clipping statistic) is taken
on each rank's partial, and only then is the pending all_reduce(sum) applied -- what DTensor
did when it treated max as linear and delayed the redistribution. max(a) + max(b) is not
max(a + b). Expected finding: the max over the partial sum, on every rank."""
import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F

from shardproof import Case

HIDDEN, OUT = 16, 12
WORLD_SIZES = (2, 4)


class ProjMax(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(HIDDEN, OUT, bias=False)

    def forward(self, x):
        return self.proj(x).amax(dim=-1)


class ParallelProjMax(nn.Module):
    def __init__(self, full: ProjMax, rank: int, world: int):
        super().__init__()
        self.weight = nn.Parameter(full.proj.weight.detach().chunk(world, 1)[rank].clone())
        self.rank, self.world = rank, world

    def forward(self, x):
        x_local = x.chunk(self.world, dim=-1)[self.rank]
        partial = F.linear(x_local, self.weight)  # Partial(sum) of the projection
        m = partial.amax(dim=-1)  # BUG: max of a partial sum; all_reduce(partial) must come first
        dist.all_reduce(m)  # the pending Partial(sum) reduction, applied after the max
        return m


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = ProjMax()
    return Case(single=full, distributed=lambda rank, world: ParallelProjMax(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="pytorch_165962_max_of_partial",
                meta={"source": "PyTorch PR 165962 (max over a Partial before reduction)",
                      "bug_op": "aten.amax", "bug_node": "amax", "bug_ranks": "all", "bug": "nonlinearity-on-partial",
                      "hint": r"all_reduce.*before the amax"})
