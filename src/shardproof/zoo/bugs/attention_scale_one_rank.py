"""Bug (VERDICT, "inconsistent attention scaling on one TP rank"): rank 1 builds its attention
with a stale head_dim (scale (2 * head_dim) ** -0.5) while the other ranks and the single-device
model use head_dim ** -0.5; only the heads rank 1 owns are scaled wrongly. (The all-ranks
variant is bugs/attention_scale_local_heads.) Expected finding: the multiplication of q @ k^T by
the scale, on rank 1 only."""
import math

import torch

from shardproof import Case
from tp_attention import BATCH, HEAD_DIM, HIDDEN, SEQ, Attention, ParallelAttention

WORLD_SIZES = (2, 4)


class OneRankScale(ParallelAttention):
    def __init__(self, full, rank, world):
        super().__init__(full, rank, world)
        if rank == 1:
            self.scale = 1.0 / math.sqrt(2 * HEAD_DIM)  # BUG: a stale head_dim on this rank


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Attention()
    return Case(single=full, distributed=lambda rank, world: OneRankScale(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="attention_scale_one_rank",
                meta={"source": "VERDICT: attention scaling (one rank)",
                      "bug_op": "aten.mul", "bug_node": "mul", "bug_ranks": [1], "bug": "rank-specific-mismatch",
                      "hint": r"constant arguments.*0\.5", "bug_line": "* scale"})
