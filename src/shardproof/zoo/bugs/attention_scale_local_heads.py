"""Bug: the attention scale is computed as (hidden / heads) ** -0.5 with the rank-*local* head
count, i.e. (HIDDEN / (HEADS / world)) ** -0.5 = (head_dim * world) ** -0.5, instead of
head_dim ** -0.5. Single-device (world 1) it is right; under TP every rank scales the scores
by 1/sqrt(world) too little. Expected finding: the multiplication of q @ k^T by the scale
(aten.mul in causal_attention), on every rank."""
import torch

from shardproof import Case
from tp_attention import BATCH, HIDDEN, SEQ, Attention, ParallelAttention

WORLD_SIZES = (2, 4)


class LocalHeadsScale(ParallelAttention):
    def __init__(self, full, rank, world):
        super().__init__(full, rank, world)
        self.scale = (HIDDEN / self.local_heads) ** -0.5  # BUG: global hidden / local heads != head_dim


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Attention()
    return Case(single=full, distributed=lambda rank, world: LocalHeadsScale(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="attention_scale_local_heads",
                meta={"source": "VERDICT: attention scaling",
                      "bug_op": "aten.mul", "bug_node": "mul", "bug_ranks": "all", "bug": "scaling-mismatch",
                      "hint": r"scale", "bug_line": "* scale"})
