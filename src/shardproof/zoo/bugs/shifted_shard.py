"""Bug: rank r loads shard (r + 1) % world of fc1's weight and bias (an off-by-one in the
checkpoint loader) but shard r of fc2's weight, so fc1's output columns do not line up with
fc2's input rows. Value matching relates fc1.weight/bias by a permuted Slices layout; the
row-parallel matmul then contracts mismatched shards. Expected finding: the fc2 matmul
(aten.mm), on every rank."""
import torch

from shardproof import Case
from tp_mlp import HIDDEN, MLP, ParallelMLP

WORLD_SIZES = (2, 4)


class ShiftedShard(ParallelMLP):
    def __init__(self, full: MLP, rank: int, world: int):
        super().__init__(full, rank, world)
        src = (rank + 1) % world  # BUG: should be `rank`
        with torch.no_grad():
            self.fc1.weight.copy_(full.fc1.weight.chunk(world, 0)[src])
            self.fc1.bias.copy_(full.fc1.bias.chunk(world, 0)[src])


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = MLP()
    return Case(single=full, distributed=lambda rank, world: ShiftedShard(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="shifted_shard",
                meta={"source": "checkpoint loader off by one",
                      "bug_op": "aten.mm", "bug_node": "mm", "bug_ranks": "all", "bug": "wrong-shard-offset",
                      "hint": r"shard", "bug_line": "F.linear(h, self.fc2.weight)"})
