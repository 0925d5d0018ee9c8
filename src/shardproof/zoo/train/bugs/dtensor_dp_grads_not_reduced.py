"""Bug: a DTensor tensor-parallel model trained on a dp x tp mesh whose step never sums the
gradients over the data-parallel ranks (DTensor reduces over tp only: the dp dimension is
the training loop's), so each dp rank updates with the gradient of its own batch half.
Expected: the first finding where a dp-partial gradient is used as if whole (its square in
the clipping norm), on every rank."""
from dtensor_mlp_train import TrainMLP, case as mlp_case

WORLD_SIZES = (4,)


class GradsNotReducedOverDP(TrainMLP):
    def reduce_gradients(self, grads, dp):
        return grads  # BUG: no all_reduce over dp


def case(world_size: int = 4):
    return mlp_case(world_size, dp=2, model=GradsNotReducedOverDP, name="dtensor_dp_grads_not_reduced",
                    meta={"source": "DTensor TP x manual DP training loop",
                          "bug_op": "aten.mul", "bug_ranks": "all", "bug": "missing-gradient-reduction",
                          "hint": r"all_reduce", "bug_line": "(g * g).sum()",
                          "bug_node": "mul_12", "bug_source": "mini_dtensor.py"})
