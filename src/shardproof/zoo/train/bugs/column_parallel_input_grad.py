"""Bug: the column-parallel layers' input enters without Megatron's f operator (identity
forward, all_reduce of the gradient in backward), so the gradient reaching each LayerNorm
before the attention and the MLP is each rank's partial sum over its heads or columns: the
LayerNorm weight and bias gradients are partial sums. Expected: the first finding at the
backward of ln_2 (the first the backward reaches), pointing at its forward line, on every rank."""
from gpt2_block_train import TrainParallelGPT2Block, case as gpt2_case

WORLD_SIZES = (2,)


class MissingInputGradAllReduce(TrainParallelGPT2Block):
    def enter_tp(self, x):
        return x  # BUG: no all_reduce of the input gradient over tp in backward


def case(world_size: int = 2):
    return gpt2_case(world_size, dp=1, model=MissingInputGradAllReduce, name="column_parallel_input_grad",
                     meta={"source": "Megatron f operator backward",
                           "bug_op": "aten.native_layer_norm_backward", "bug_ranks": "all", "bug": "missing-gradient-reduction",
                           "hint": r"all_reduce.*backward", "bug_line": "self.ln_2(x)",
                           "bug_node": "native_layer_norm_backward", "bug_source": "gpt2_block.py"})
