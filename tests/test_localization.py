"""Localization and bug classes on small programs: an op that reads another tensor in place
of its operand (a branch taken twice) and an op that puts its operands in the wrong order
(halves crossed) are wrong-operand findings at that op on the ranks that run it, however
the wrong value is consumed later; a constant that differs from the single-device op's is
named in the hint."""
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from shardproof import Case  # noqa: E402
from shardproof.api import cross_check, prepare, verify_prepared  # noqa: E402

HIDDEN, OUT = 8, 8


class TwoBranches(nn.Module):
    def forward(self, x):
        return torch.relu(x) + torch.sigmoid(x)


class FirstBranchTwiceOnRank0(nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def forward(self, x):
        a, b = torch.relu(x), torch.sigmoid(x)
        return a + (a if self.rank == 0 else b)


class Projection(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(OUT, HIDDEN))

    def forward(self, x):
        return F.linear(x, self.weight)


class ColumnParallelHalvesCrossed(nn.Module):
    """Rank r computes its block of the output features and all-gathers the blocks; rank 1
    returns the two halves of its block crossed."""

    def __init__(self, full, rank, world):
        super().__init__()
        self.rank, self.world = rank, world
        self.weight = nn.Parameter(full.weight.detach().chunk(world, 0)[rank].clone())

    def forward(self, x):
        y = F.linear(x, self.weight)
        if self.rank == 1:
            half = y.shape[-1] // 2
            y = torch.cat((y[..., half:], y[..., :half]), dim=-1)
        blocks = torch.empty((self.world * y.shape[0], y.shape[1]))
        dist.all_gather_into_tensor(blocks, y.contiguous())
        return blocks.view(self.world, *y.shape).permute(1, 0, 2).reshape(y.shape[0], -1)


def _first_finding(case, world):
    p = prepare(case, world)
    report = verify_prepared(p)
    assert report.status == "violation", report.reason
    assert cross_check(p), "a violation must be backed by a numeric difference"
    return report.findings[0]


def test_branch_read_twice_is_a_wrong_operand_at_the_add():
    torch.manual_seed(0)
    case = Case(single=TwoBranches(), distributed=lambda rank, world: FirstBranchTwiceOnRank0(rank),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=2)
    f = _first_finding(case, 2)
    assert (f.kind, f.op, f.rank) == ("wrong-operand", "aten.add", [0]), f


def test_halves_crossed_is_a_wrong_operand_at_the_cat():
    torch.manual_seed(0)
    full = Projection()
    case = Case(single=full, distributed=lambda rank, world: ColumnParallelHalvesCrossed(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=2)
    f = _first_finding(case, 2)
    assert (f.kind, f.op, f.rank) == ("wrong-operand", "aten.cat", [1]), f
    assert "out of order" in f.message, f.message


class ShiftedOnRank0(nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.shift = 2.0 if rank == 0 else 1e-5

    def forward(self, x):
        return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.shift)


class Shifted(nn.Module):
    def forward(self, x):
        return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


def test_a_constant_differing_on_one_rank_is_named():
    torch.manual_seed(0)
    case = Case(single=Shifted(), distributed=lambda rank, world: ShiftedOnRank0(rank),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=2)
    f = _first_finding(case, 2)
    assert (f.kind, f.op, f.rank) == ("rank-specific-mismatch", "aten.add", [0]), f
    assert "argument 1 = 2.0 where the single-device op has 1e-05" in f.hint, f.hint
