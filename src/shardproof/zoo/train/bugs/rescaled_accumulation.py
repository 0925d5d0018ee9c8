"""Bug (torchtitan issue 1733): the accumulated gradients are rescaled after every
microbatch (``(acc + g) / k``) although each microbatch's loss is already normalised by
the global token count: the first microbatch's gradient is scaled down k times more than
the last's. Expected: the first finding at the rescaling division, on every rank."""
from tp_mlp_train import TrainParallelMLP, case as mlp_case

WORLD_SIZES = (2,)


class RescaledAccumulation(TrainParallelMLP):
    def accumulate(self, grads, new, train):
        # BUG: the running sum is rescaled at every microbatch, not once at the end
        return {n: (g if n not in grads else grads[n] + g) / train.microbatches for n, g in new.items()}


def case(world_size: int = 2):
    return mlp_case(world_size, dp=1, model=RescaledAccumulation, name="rescaled_accumulation",
                    meta={"source": "torchtitan issue 1733",
                          "bug_op": "aten.div", "bug_ranks": "all", "bug": "scaling-mismatch",
                          "hint": r"scale the whole once", "bug_line": "/ train.microbatches",
                          "bug_node": "div_2", "bug_source": "rescaled_accumulation.py:13"})
