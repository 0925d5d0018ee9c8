"""Bug (tokenspeed PR 80): a code path that skips the TP sharding of an MLP (every rank holds
and computes the FULL MLP) still ends with the row-parallel all_reduce, as if each rank's
output were a partial sum -- the result is world_size times the single-device output.
Expected finding: the all_reduce, on every rank."""
import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case
from tp_mlp import HIDDEN, MLP

WORLD_SIZES = (2, 4)


class ReplicatedMLPReduced(nn.Module):
    def __init__(self, full: MLP, rank: int, world: int):
        super().__init__()
        self.mlp = MLP()
        self.mlp.load_state_dict(full.state_dict())  # not sharded: the full weights on every rank

    def forward(self, x):
        y = self.mlp(x)
        dist.all_reduce(y)  # BUG: y is already complete; summing it over ranks multiplies by world_size
        return y


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = MLP()
    return Case(single=full, distributed=lambda rank, world: ReplicatedMLPReduced(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="tokenspeed_80_full_mlp_summed",
                meta={"source": "tokenspeed PR 80 (full MLP per rank all-reduced as if partial)",
                      "bug_op": "_c10d_functional.all_reduce", "bug_node": "all_reduce", "bug_ranks": "all",
                      "bug": "reduced-twice",
                      "hint": r"remove the extra all_reduce"})
