"""Bug: rank 1 builds its attention RMSNorm with eps=1e-6 (a stale config) while every other
rank and the single-device model use 1e-5. Expected finding: the ``mean + eps`` add inside the
decomposed RMSNorm (aten.add in rms_norm), on rank 1 only."""
import torch

from shardproof import Case
from llama_block import BATCH, HIDDEN, SEQ, LlamaBlock, ParallelLlamaBlock

WORLD_SIZES = (2, 4)


class RankConstantMismatch(ParallelLlamaBlock):
    def __init__(self, full, rank, world):
        super().__init__(full, rank, world)
        if rank == 1:
            self.attention_norm.eps = 1e-6  # BUG: differs from the single-device 1e-5


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = LlamaBlock()
    return Case(single=full, distributed=lambda rank, world: RankConstantMismatch(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="rank_constant_mismatch",
                meta={"source": "VERDICT: rank constant",
                      "bug_op": "aten.add", "bug_node": "add", "bug_ranks": [1], "bug": "rank-specific-mismatch",
                      "hint": r"1e-06", "bug_line": "+ eps"})
