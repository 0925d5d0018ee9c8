"""Bug: a sequence-parallel MLP block that first all-gathers the raw input (the full sequence
is shared with a sibling branch) and then normalizes its own rows of it takes those rows from
the wrong offset: the shard length is computed as x.size(0) // world although x is already
the local shard, so ranks 1..N-1 apply LayerNorm to the wrong sequence rows (rank 0 happens
to be right). The MLP is token-wise, so only those ranks' outputs are wrong. Expected finding:
the narrow on ranks 1..N-1 (the ranks' pieces overlap instead of tiling the sequence), with
the counterexample where the wrongly offset rows first meet the rank's own rows (the
residual add)."""
import torch
import torch.nn.functional as F

from shardproof import Case
from sp_mlp import BATCH, HIDDEN, SEQ, Block, SequenceParallelBlock, shard_sequence

WORLD_SIZES = (2, 4)


class WrongShardLayerNorm(SequenceParallelBlock):
    def __init__(self, full: Block, rank: int, world: int):
        super().__init__(full, rank, world)
        self.rank = rank

    def forward(self, x):
        x_full = self.gather_sequence(x)
        s_local = x.size(0) // self.world  # BUG: x is already the local shard; should be x.size(0)
        h = self.ln(x_full.narrow(0, self.rank * s_local, x.size(0)))
        h = self.gather_sequence(h)
        h = F.gelu(self.fc1(h))
        y = F.linear(h, self.fc2.weight)
        y = self.scatter_sequence(y)
        return x + (y + self.fc2.bias)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Block()
    return Case(single=full, distributed=lambda rank, world: WrongShardLayerNorm(full, rank, world),
                inputs={"x": torch.randn(SEQ, BATCH, HIDDEN)}, dist_inputs=shard_sequence,
                world_size=world_size, name="sp_layernorm_wrong_shard",
                meta={"source": "Megatron SP LayerNorm",
                      "bug_op": "aten.slice", "bug_node": "slice_2", "bug_ranks": list(range(1, world_size)),
                      "bug": "wrong-shard-offset",
                      "hint": r"offset", "bug_line": "narrow(0"})
