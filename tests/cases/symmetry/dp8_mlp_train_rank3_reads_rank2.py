"""Bug: dp rank 3 loads rank 2's chunk of the batch (an off-by-one in its data loader) instead of
its own: every rank runs the same ops, so rank 3 is in rank 0's class, but the members' blocks are
no longer a permutation of the batch -- block 2 is counted twice and block 3 never, so the dp
all_reduce's gradient is not the full batch's (issue 16: a dp class proved once with the rank's
block as a parameter must still see it)."""
from dataclasses import replace

from dp8_mlp_train import case as dp8_case

BUG_RANK, READS = 3, 2
WORLD_SIZES = (8,)


def _shard(rank, world, inputs):
    chunk = READS if rank == BUG_RANK else rank  # BUG: rank 3 takes rank 2's chunk
    return {k: v.chunk(world, 0)[chunk] for k, v in inputs.items()}


def case(world_size: int = 8):
    return replace(dp8_case(world_size, name="dp8_mlp_train_rank3_reads_rank2"), dist_inputs=_shard,
                   meta={"source": "issue 16: a dp rank loading another rank's chunk"})
