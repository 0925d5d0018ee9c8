"""Correct: the dp8 MLP training step of dp8_mlp_train.py, where every rank multiplies one
gradient by LATE_SCALE (1.0) after the dp all_reduce: a late local op every rank runs with
the same scalar. Its twin dp8_mlp_train_rank5_late.py differs on dp rank 5 in that one scalar
only (issue 16: a member whose graph differs in one late node)."""
from dp8_mlp_train import case as dp8_case
from tp_mlp_train import TrainParallelMLP

WORLD_SIZES = (8,)


class LateScaled(TrainParallelMLP):
    def late_scale(self) -> float:
        return 1.0

    def reduce_gradients(self, grads):
        grads = super().reduce_gradients(grads)
        first = next(iter(grads))
        return {**grads, first: grads[first] * self.late_scale()}


def case(world_size: int = 8, model=LateScaled, name="dp8_mlp_train_late_scale"):
    return dp8_case(world_size, model=model, name=name)
