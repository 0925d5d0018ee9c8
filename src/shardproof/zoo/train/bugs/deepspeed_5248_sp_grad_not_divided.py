"""Bug (DeepSpeed issue 5248, sequence-parallel gradient not divided): with DeepSpeed Ulysses
each rank computes its cross-entropy loss as the mean over its own sequence shard, and the
gradients are all-reduced (summed) over the sequence-parallel ranks; the division that
should follow (`tensor_to_allreduce.div_`) is never applied -- since DeepSpeed PR 4957 the
`divide` flag is always false -- so the gradients come out sp times too large.

Fidelity: the correct twin (src/shardproof/zoo/train/sp_replicated_train_averaged.py) is a
replicated LayerNorm + MLP on sequence shards, each rank's loss its shard's masked sum over
the per-rank token count; Ulysses' all_to_all sits in attention, which this token-wise block
does not have, and does not touch the gradient reduction where the bug is. DeepSpeed sums
over the sequence-data-parallel group and divides by the data-parallel size; here dp = 1,
so the missing division is by sp. Expected (sp2): the first finding at the all_reduce whose
result is exactly 2 times the single-device gradient, on every rank."""
from mini_megatron import all_reduce
from sp_replicated_train_averaged import PerRankMeanAveraged, case as averaged_case

WORLD_SIZES = (2,)


class GradientsNotDivided(PerRankMeanAveraged):
    def reduce_gradients(self, grads):
        return {n: all_reduce(g, self.mesh.tp_group) for n, g in grads.items()}  # BUG: never divided by sp


def case(world_size: int = 2):
    return averaged_case(world_size, model=GradientsNotDivided, name="deepspeed_5248_sp_grad_not_divided",
                         meta={"source": "DeepSpeed issue 5248",
                               "bug_op": "aten.copy", "bug_ranks": "all", "bug": "scaling-mismatch",
                               "hint": r"scale factor", "bug_line": "dist.all_reduce(t, op=op, group=group)",
                               "bug_node": "copy_1", "bug_source": "mini_megatron.py"})
