"""Bug: ZeRO-2 with hybrid sharding (replicate x shard, HSDP): the gradients are
reduce-scattered over the replicate group instead of the shard group (and then all-reduced
over the replicate group as intended), so each rank holds the chunk of its replica index,
summed over the wrong ranks. Expected: the first finding at that reduce_scatter."""
from gpt2_block_zero import ZeroGPT2Block, case as zero_case
from mini_megatron import _reduce_scatter_seq

WORLD_SIZES = (4,)


class ReduceScatterWrongGroup(ZeroGPT2Block):
    def reduce_scatter(self, g):
        return _reduce_scatter_seq(g, self.mesh.replicate_group)  # BUG: the shard group holds the chunks


def case(world_size: int = 4):
    return zero_case(world_size, stage=2, shard_size=2, model=ReduceScatterWrongGroup,
                     name="zero_reduce_scatter_wrong_group",
                     meta={"source": "ZeRO wrong group",
                           "bug_op": "_c10d_functional.reduce_scatter_tensor", "bug_ranks": "all",
                           "bug": "wrong-group",
                           "hint": r"group", "bug_line": "dist.reduce_scatter_tensor(out",
                           "bug_node": "reduce_scatter_tensor", "bug_source": "mini_megatron.py"})
