"""Bug: dp rank 4 loads dp rank 3's batch chunk instead of its own (overlapping data slices:
chunk 3 counted twice, chunk 4 never). Every rank runs the same program, so all eight are
one class and rank 4's graph is derived; only its input relation differs (issue 16: the
proof by class must still find it)."""
from dp8_mlp_train import case as dp8_case
from mini_megatron import dp_shard

BUG_RANK = 4
WORLD_SIZES = (8,)


def overlapping(rank, world, inputs):
    """dp_shard, but rank 4 takes chunk 3 (BUG)."""
    return dp_shard(1)(rank - 1 if rank == BUG_RANK else rank, world, inputs)


def case(world_size: int = 8):
    from dataclasses import replace
    return replace(dp8_case(world_size, name="dp8_mlp_train_overlapping_slices"), dist_inputs=overlapping)
