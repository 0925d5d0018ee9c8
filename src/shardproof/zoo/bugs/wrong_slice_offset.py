"""Bug: rank 1 reads its RoPE cos/sin tables (replicated buffers) starting at a stale start
position 1 instead of 0, i.e. ``rope_cos[1:1+s]``, so its queries and keys are rotated by the
wrong angles. Expected finding: the slice of the replicated cos table on rank 1 (aten.slice in
rope), or at the latest the multiplication that consumes it."""
import torch

from shardproof import Case
from llama_block import BATCH, HIDDEN, SEQ, LlamaBlock, ParallelLlamaBlock, apply_rope

WORLD_SIZES = (2, 4)


class WrongSliceOffset(ParallelLlamaBlock):
    def __init__(self, full, rank, world):
        super().__init__(full, rank, world)
        self.start_pos = 1 if rank == 1 else 0  # BUG: rank 1 has a stale position offset

    def rope(self, x):
        s, p = x.shape[-2], self.start_pos
        return apply_rope(x, self.rope_cos[p:p + s], self.rope_sin[p:p + s])


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = LlamaBlock()
    return Case(single=full, distributed=lambda rank, world: WrongSliceOffset(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="wrong_slice_offset",
                meta={"source": "Aerify: slice offset",
                      "bug_op": "aten.slice", "bug_node": "slice_1", "bug_ranks": [1], "bug": "wrong-shard-offset",
                      "hint": r"offset", "bug_line": "self.rope_cos[p:p + s]"})
