"""Bug (Megatron-LM issue 1446): with sequence parallelism each rank's LayerNorm sees only
its sequence shard, so its weight and bias gradients are partial sums over tp; the step
forgets the all_reduce of those gradients. Expected: the first finding at the gradient's
use by the clipping norm (a partial sum squared), on every rank."""
from sp_mlp_train import TrainSequenceParallelBlock, case as sp_case

WORLD_SIZES = (2,)


class LayerNormGradNotReduced(TrainSequenceParallelBlock):
    sequence_parallel = frozenset({"fc2.bias"})  # BUG: ln.weight and ln.bias are missing


def case(world_size: int = 2):
    return sp_case(world_size, model=LayerNormGradNotReduced, name="sp_layernorm_grad_not_reduced",
                   meta={"source": "Megatron-LM issue 1446",
                         "bug_op": "aten.add", "bug_ranks": "all", "bug": "missing-gradient-reduction",
                         "hint": r"all_reduce", "bug_line": "(g * g).sum()",
                         "bug_node": "add_13", "bug_source": "mini_megatron.py"})
