"""Bug (Entangle): the output layer tied to the vocab-parallel embedding multiplies the
hidden states by each rank's vocabulary rows, so the gradient of its input is each rank's
partial sum over its vocabulary columns; Megatron's ``parallel_lm_logits`` enters through
the f operator (identity forward, all_reduce of the gradient over tp in backward). Here the
input enters without it, so the final hidden states' gradient is never all-reduced.
Expected: the first finding where that partial gradient is first used as if whole -- the
row-parallel fc2's weight gradient (the gradient's product with the rank's activations), on
every rank."""
from vocab_parallel_lm_train import TrainParallelTiedLM, case as lm_case

WORLD_SIZES = (2,)


class TiedOutputInputGradNotReduced(TrainParallelTiedLM):
    def output_layer_input(self, h):
        return h  # BUG: no all_reduce of the input gradient over tp in backward


def case(world_size: int = 2):
    return lm_case(world_size, dp=1, model=TiedOutputInputGradNotReduced, name="tied_output_input_grad_not_reduced",
                   meta={"source": "Entangle (tied vocab-parallel output layer, missing input-gradient all_reduce)",
                         "bug_op": "aten.mm", "bug_ranks": "all", "bug": "missing-gradient-reduction",
                         "hint": r"all_reduce.*backward", "bug_line": "self.fc2.weight",
                         "bug_node": "mm_4", "bug_source": "vocab_parallel_lm_train.py:66"})  # fc2's forward line
