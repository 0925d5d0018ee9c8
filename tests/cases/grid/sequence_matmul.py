"""A sequence-sharded activation through a linear: rank r holds x[:, r-th sequence block], a
non-contiguous slice, so torch's matmul multiplies it as a batched product with the weight
broadcast (bmm with an expanded weight), while the single device folds its contiguous x into
rows (view, mm, view). The outputs are all-gathered along the sequence. BUG=1: a rank reads
the next rank's block (wrong offset). ODD=1: the shard made contiguous first, so it is folded into rows too."""
import os

import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case

B, S, H, O = 2, 8, 4, 3


def bug() -> bool:
    """BUG=1 in the environment selects the buggy twin (read at run time: gloo ranks inherit it)."""
    return os.environ.get("BUG") == "1"


def odd() -> bool:
    """ODD=1: a correct program written oddly (a contiguous copy folded into rows, a column-major grid)."""
    return os.environ.get("ODD") == "1"


class Single(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(w.clone())

    def forward(self, x):
        return x @ self.w


class SequenceParallel(nn.Module):
    def __init__(self, w, rank, world):
        super().__init__()
        self.w = nn.Parameter(w.clone())
        self.rank, self.world = rank, world

    def forward(self, x):
        s = S // self.world
        r = (self.rank + 1) % self.world if bug() else self.rank
        block = x[:, r * s:(r + 1) * s]
        y = block.contiguous() @ self.w if odd() else block @ self.w  # ODD: folded into rows, as the single device
        parts = [torch.empty_like(y) for _ in range(self.world)]
        dist.all_gather(parts, y.contiguous())
        return torch.cat(parts, dim=1)


def case(world_size=2):
    torch.manual_seed(0)
    w = torch.randn(H, O)
    return Case(single=Single(w), distributed=lambda r, world: SequenceParallel(w, r, world),
                inputs={"x": torch.randn(B, S, H)}, world_size=world_size, name="sequence_matmul",
                expect={"out": "Replicate()"})
