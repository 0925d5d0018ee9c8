"""Complex RoPE (torchtitan's form: ``view_as_complex`` of adjacent pairs times a complex table,
``view_as_real``) on attention heads split over the ranks: each rank rotates its heads with the
whole table (correct); with ``BUG=shifted_table`` rank r reads the table from row r on, as if
it held a sequence shard (its positions are wrong)."""
import os

import torch
from torch import nn

from shardproof import Case

B, S, H, D = 2, 8, 4, 8


class Rope(nn.Module):
    def __init__(self, shift: int = 0):
        super().__init__()
        freqs = 1.0 / (10000.0 ** (torch.arange(0, D, 2).float() / D))
        angles = torch.outer(torch.arange(2 * S).float(), freqs)
        self.register_buffer("cache", torch.polar(torch.ones_like(angles), angles))  # complex64
        self.shift = shift

    def forward(self, x):
        table = self.cache[self.shift:self.shift + S].view(1, S, 1, D // 2)
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * table).flatten(3)


def case(world_size: int = 2) -> Case:
    bug = os.environ.get("BUG") == "shifted_table"
    torch.manual_seed(0)
    return Case(single=Rope(), distributed=lambda rank, world: Rope(rank if bug else 0),
                inputs={"x": torch.randn(B, S, H, D)},
                dist_inputs=lambda rank, world, inputs: {"x": inputs["x"].chunk(world, 2)[rank]},
                world_size=world_size, expect={"out": "Shard(2)"}, name="complex_rope")
