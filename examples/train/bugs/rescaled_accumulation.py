"""Bug (torchtitan issue 1733): the accumulated gradients are rescaled after every
microbatch (``(acc + g) / k``), so earlier microbatches are scaled down k times more than
later ones. Expected: the first finding at the rescaling division of the accumulation."""
from tp_mlp_train import TrainParallelMLP, case as mlp_case

WORLD_SIZES = (2,)


class RescaledAccumulation(TrainParallelMLP):
    def microbatch_loss(self, mb, total_tokens, train):
        return super().microbatch_loss(mb, total_tokens, train) * train.microbatches

    def accumulate(self, grads, new, train):
        # BUG: the running sum is rescaled at every microbatch, not once at the end
        return {n: (g if n not in grads else grads[n] + g) / train.microbatches for n, g in new.items()}


def case(world_size: int = 2):
    return mlp_case(world_size, dp=1, model=RescaledAccumulation, name="rescaled_accumulation",
                    meta={"bug_op": "aten.div", "bug_ranks": "all", "bug": "scaling-mismatch"})
