"""Not a bug but a gap: the distributed program uses an op the engine has no rule for (group
norm's ``native_group_norm``, a core-ATen op torch does not decompose), so the verdict must be
`unknown`, naming that op — never `verified`. (This case used a cumulative sum until
``aten.cumsum`` got a rule.)"""
import torch
from torch import nn
import torch.nn.functional as F

from shardproof import Case

WORLD_SIZES = (2,)


class Running(nn.Module):
    def forward(self, x):
        return F.group_norm(x, 2) * 2


class ParallelRunning(nn.Module):
    def forward(self, x):
        return 2 * F.group_norm(x, 2)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    return Case(single=Running(), distributed=lambda rank, world: ParallelRunning(),
                inputs={"x": torch.randn(4, 8)}, world_size=world_size, name="unknown_op",
                meta={"source": "coverage gap", "unknown_op": "aten.native_group_norm"})
