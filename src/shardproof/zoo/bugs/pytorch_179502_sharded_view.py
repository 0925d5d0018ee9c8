"""Bug (PyTorch issue 179502, "sharded view incorrectly passes when redistribution is needed"),
written out as the plain program the buggy DTensor ran: ``x[12, 8]`` sharded on dim 1 is
viewed as ``(-1, 6)`` *locally* -- each rank views its [12, 8/W] block -- and the result is
treated as Shard(0) of the [16, 6] view, so all-gathering the rows assembles the wrong
tensor. (The fixed DTensor program is dtensor_sharded_view.) Expected finding, on every rank:
the local view, classed wrong-view-size: at world 2 its [8, 6] rows hold elements in an
arrangement no layout of the single-device view describes; at world 4 each rank's [4, 6] view
is still a view of x's elements, and the first wrong tensor is the gather that stacks those
views as row shards -- but the view, whose sizes make no piece of the single-device view, is
the cause."""
import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case
from dtensor_sharded_view import COLS, ROWS, VIEW_COLS, View, shard_columns

WORLD_SIZES = (2, 4)


class LocalView(nn.Module):
    def __init__(self, world: int):
        super().__init__()
        self.world = world

    def forward(self, x):
        local = x.view(-1, VIEW_COLS)  # BUG: x is a column shard; viewing it is not a shard of the view
        out = torch.empty((self.world * local.shape[0], VIEW_COLS))
        dist.all_gather_into_tensor(out, local)  # as if `local` were Shard(0) of the view
        return out


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    return Case(single=View(), distributed=lambda rank, world: LocalView(world),
                inputs={"x": torch.randn(ROWS, COLS)}, dist_inputs=shard_columns, world_size=world_size,
                name="pytorch_179502_sharded_view",
                meta={"source": "PyTorch issue 179502 (DTensor view of Shard(1) without redistribution)",
                      "bug_op": "aten.view", "bug_node": "view", "bug": "wrong-view-size", "bug_ranks": "all",
                      "hint": r"view of a shard|gather"},
                expect={"out": "Replicate()"})
