"""Bug (transformers-neuronx PR 108/109, Aerify's catalogue): switching from tensor- to
batch-parallel, the all_to_all is applied to the sequence-first activations as they are, so
all_to_all_single (which splits dim 0) scatters *sequence* chunks instead of batch chunks; the
receive buffer is then reassembled as if it held batch chunks. Shapes line up, values do not.
Expected finding: the all_to_all, on every rank (it splits a dim that is not the batch); the
correct twin is batch_all_to_all."""
import torch

from shardproof import Case
from batch_all_to_all import BATCH, HIDDEN, SEQ, Projection, TensorToBatchParallel

WORLD_SIZES = (2, 4)


class WrongAxis(TensorToBatchParallel):
    def to_split_dim(self, y):
        return y.contiguous()  # BUG: dim 0 is the sequence; the batch (dim 1) must be moved there first


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Projection()
    return Case(single=full, distributed=lambda rank, world: WrongAxis(full, rank, world),
                inputs={"x": torch.randn(SEQ, BATCH, HIDDEN)}, world_size=world_size, name="neuronx_a2a_wrong_axis",
                meta={"source": "transformers-neuronx PR 108/109 (all_to_all splits the wrong axis)",
                      "bug_op": "_c10d_functional.all_to_all_single", "bug_node": "all_to_all_single",
                      "bug_ranks": "all", "bug": "wrong-dim",
                      "hint": r"dim", "bug_line": "all_to_all_single"},
                expect={"out": "Shard(1)"})
