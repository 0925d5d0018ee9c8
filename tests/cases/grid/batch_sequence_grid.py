"""A loss summed over a grid of blocks: 4 ranks, rank (b, c) holds batch row b and sequence
half c of x (a dp x cp layout), computes y = x_block @ w (viewed through rows and back, as a
linear does) and the sum of y^2 over its block; one all_reduce over all 4 ranks gives the
whole sum. ODD=1: the ranks cover the grid column-major. BUG=1: rank 3 takes batch row 0 (block (0, 1) counted twice, (1, 1) never)."""
import torch
import torch.distributed as dist

from sequence_matmul import B, H, O, S, SequenceParallel, Single as Linear, bug, odd
from shardproof import Case


class Single(Linear):
    def forward(self, x):
        y = (x.reshape(B * S, H) @ self.w).view(B, S, O)
        return (y * y).sum()


class Grid(SequenceParallel):
    def forward(self, x):
        b, c = divmod(self.rank, 2)
        if odd():  # ranks laid over the grid column-major
            c, b = divmod(self.rank, 2)
        if bug() and self.rank == 3:
            b = 0
        s = S // 2
        block = x[b:b + 1, c * s:(c + 1) * s]
        y = (block.reshape(s, H) @ self.w).view(1, s, O)
        loss = (y * y).sum()
        dist.all_reduce(loss)
        return loss


def case(world_size=4):
    torch.manual_seed(0)
    w = torch.randn(H, O)
    return Case(single=Single(w), distributed=lambda r, world: Grid(w, r, world),
                inputs={"x": torch.randn(B, S, H)}, world_size=world_size, name="batch_sequence_grid",
                expect={"out": "Replicate()"})
