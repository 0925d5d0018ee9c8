"""Soundness class 5: a buffer the distributed program recomputes itself (a RoPE-like
table) instead of copying it from the single-device program. shardproof's redraw of the
single-device buffer cannot reach it: it relates by the original values (a constant of the
program). ``wrong``: the rank recomputes it with another frequency (bug)."""
import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case

ROWS, DIM = 8, 6
WORLD_SIZES = (2, 4)


def table(freq: float) -> torch.Tensor:
    return torch.cos(freq * torch.arange(DIM, dtype=torch.float32))


class Scaled(nn.Module):
    def __init__(self, freq: float = 0.5):
        super().__init__()
        self.register_buffer("table", table(freq))

    def forward(self, x):
        return x * self.table


class ParallelScaled(Scaled):
    """Rows of x sharded over the ranks; each rank scales its rows and the rows are gathered."""

    def __init__(self, world: int, freq: float):
        super().__init__(freq)
        self.world = world

    def forward(self, x):
        y = x * self.table
        out = torch.empty((y.shape[0] * self.world, DIM), dtype=y.dtype)
        dist.all_gather_into_tensor(out, y.contiguous())
        return out


def case(world_size: int = 2, wrong: bool = False) -> Case:
    torch.manual_seed(0)
    return Case(single=Scaled(), distributed=lambda rank, world: ParallelScaled(world, 0.7 if wrong else 0.5),
                inputs={"x": torch.randn(ROWS, DIM)},
                dist_inputs=lambda rank, world, data: {"x": data["x"].chunk(world, 0)[rank]},
                world_size=world_size, name=f"recomputed_buffer[{'wrong' if wrong else 'same'}]",
                expect={"out": "Replicate()"})
