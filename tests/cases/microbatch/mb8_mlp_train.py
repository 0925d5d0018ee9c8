"""Correct: the tensor-parallel MLP's Megatron training step at dp2 (tp1) with 8 microbatches
of gradient accumulation (issue 16, microbatches flat in M: microbatches 2..7 run one program)."""
from dataclasses import replace

from mini_megatron import regression_batch
from tp_mlp import HIDDEN
from tp_mlp_train import TRAIN, TrainParallelMLP, case as mlp_case

WORLD_SIZES = (2,)
EIGHT_MICROBATCHES = replace(TRAIN, microbatches=8)
BATCH, SEQ = 16, 3  # 8 rows per dp rank: one per microbatch


class CountedMicrobatches(TrainParallelMLP):
    """The step with its microbatches counted (``self.seen``), for programs that act on one."""

    def accumulate_gradients(self, params, inputs, train):
        self.seen = 0
        return super().accumulate_gradients(params, inputs, train)


def case(world_size: int = 2, model=CountedMicrobatches, name="mb8_mlp_train", train=EIGHT_MICROBATCHES):
    base = mlp_case(world_size, dp=world_size, model=model, train=train, name=name,
                    meta={"source": "issue 16: microbatches flat in M"})
    base.inputs = regression_batch(BATCH, SEQ, HIDDEN)
    return base
