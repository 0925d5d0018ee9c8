"""Correct: the tensor-parallel MLP's Megatron training step at dp2 (tp1) with 4 microbatches
of gradient accumulation (microbatches 1..3 run one program: issue 16)."""
from dataclasses import replace

from tp_mlp_train import TRAIN, TrainParallelMLP, case as mlp_case

WORLD_SIZES = (2,)
FOUR_MICROBATCHES = replace(TRAIN, microbatches=4)


class CountedMicrobatches(TrainParallelMLP):
    """The step with its microbatches counted (``self.seen``), for programs that act on one."""

    def accumulate_gradients(self, params, inputs, train):
        self.seen = 0
        return super().accumulate_gradients(params, inputs, train)


def case(world_size: int = 2, model=TrainParallelMLP, name="mb4_mlp_train"):
    return mlp_case(world_size, dp=world_size, model=model, train=FOUR_MICROBATCHES, name=name,
                    meta={"source": "issue 16: microbatches (correct)"})
