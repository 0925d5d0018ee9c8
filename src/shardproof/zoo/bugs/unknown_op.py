"""Not a bug but a gap: the distributed program uses an op the engine has no rule for
(a cumulative sum), so the verdict must be `unknown`, naming that op — never `verified`."""
import torch
from torch import nn

from shardproof import Case

WORLD_SIZES = (2,)


class Running(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=1) * 2


class ParallelRunning(nn.Module):
    def forward(self, x):
        return torch.cumsum(x * 2, dim=1)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    return Case(single=Running(), distributed=lambda rank, world: ParallelRunning(),
                inputs={"x": torch.randn(4, 8)}, world_size=world_size, name="unknown_op",
                meta={"source": "coverage gap", "unknown_op": "aten.cumsum"})
