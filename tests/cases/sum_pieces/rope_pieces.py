"""Complementary partial sums through one linear map, completed after an all_to_all (the shape
of a repeated KV head's gradient under Ulysses, forward-only and small): 8 query heads in 2
groups of 4, cp 4, rank r holding heads 2r, 2r+1 (half of group r // 2). Each rank sums its two
heads (a partial of its group's sum), multiplies by the RoPE-like table (the same on every rank),
trades the partial's sequence chunks by an all_to_all, and sums the two replicas of each group
it receives -- the single device sums each group's 4 heads, then multiplies. All gathered back.
The sums are spelled as a repeat's backward spells them (keepdim, then a view).
Twins (``bug``): ``other_table`` (odd ranks multiply by another position's table),
``summed_twice`` (a group's first replica added twice, its second never), ``wrong_subgroup``
(the replicas of two different groups summed together). Labels: tests/test_sum_pieces_cases.py."""
import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case

WORLD_SIZES = (4,)
B, HEADS, GROUPS, SEQ, DIM = 2, 8, 2, 4, 2


class Whole(nn.Module):
    def forward(self, g, table):
        return g.view(B, GROUPS, HEADS // GROUPS, SEQ, DIM).sum(2, keepdim=True).view(B, GROUPS, SEQ, DIM) * table


class Pieces(nn.Module):
    def __init__(self, rank: int, world: int, bug: str = ""):
        super().__init__()
        self.rank, self.world, self.bug = rank, world, bug

    def forward(self, g, table):
        per = HEADS // self.world
        if self.bug == "other_table" and self.rank % 2:
            table = table.roll(1, 0)  # BUG: another position's (another rank's) table
        mine = g[:, self.rank * per:(self.rank + 1) * per].reshape(B, 1, per, SEQ, DIM)
        part = mine.sum(2, keepdim=True).view(B, 1, SEQ, DIM) * table  # a partial of its group's sum
        send = [c.contiguous() for c in part.chunk(self.world, dim=2)]
        recv = [torch.empty_like(c) for c in send]
        dist.all_to_all(recv, send)  # recv[j]: rank j's partial, this rank's sequence chunk
        if self.bug == "summed_twice":
            recv[1::2] = recv[0::2]  # BUG: each group's first replica twice
        pieces = torch.cat(recv, dim=1)  # (B, world, s, D): the replicas, group-major
        reps = self.world // GROUPS
        if self.bug == "wrong_subgroup":
            out = pieces.view(B, reps, GROUPS, -1, DIM).sum(1, keepdim=True).squeeze(1)  # BUG: two groups summed
        else:
            out = pieces.view(B, GROUPS, reps, -1, DIM).sum(2, keepdim=True).squeeze(2)
        blocks = [torch.empty_like(out) for _ in range(self.world)]
        dist.all_gather(blocks, out.contiguous())
        return torch.cat(blocks, dim=2)


def case(world_size: int = 4, bug: str = "") -> Case:
    gen = torch.Generator().manual_seed(0)
    inputs = {"g": torch.randn(B, HEADS, SEQ, DIM, generator=gen), "table": torch.randn(SEQ, DIM, generator=gen)}
    return Case(single=Whole(), distributed=lambda rank, world: Pieces(rank, world, bug), inputs=inputs,
                world_size=world_size, name="rope_pieces" + (f"_{bug}" if bug else ""))
