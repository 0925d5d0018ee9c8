"""Not a bug but a gap: the distributed program uses an op the engine has no rule for (the Bessel
function ``aten.special_bessel_j0``, outside core ATen, which torch does not decompose), so the
verdict must be `unknown`, naming that op — never `verified`. (This case used a cumulative sum
until ``aten.cumsum`` got a rule, then group norm until the core-ATen vision ops got theirs.)"""
import torch
from torch import nn

from shardproof import Case

WORLD_SIZES = (2,)


class Running(nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x) * 2


class ParallelRunning(nn.Module):
    def forward(self, x):
        return 2 * torch.special.bessel_j0(x)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    return Case(single=Running(), distributed=lambda rank, world: ParallelRunning(),
                inputs={"x": torch.randn(4, 8)}, world_size=world_size, name="unknown_op",
                meta={"source": "coverage gap", "unknown_op": "aten.special_bessel_j0"})
