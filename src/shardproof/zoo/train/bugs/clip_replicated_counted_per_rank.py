"""Bug: the global grad norm sums the squared norms of the tensor-parallel ranks, but each
rank also adds its replicated parameters' squares (LayerNorm weights, row-parallel biases),
which are then counted tp times. Expected: the first finding at the tp all_reduce of the
squared norm."""
import torch

from mini_megatron import all_reduce
from tp_mlp_train import TrainParallelMLP, case as mlp_case

WORLD_SIZES = (2,)


class ReplicatedCountedPerRank(TrainParallelMLP):
    def grad_norm(self, grads):
        sq = sum((g * g).sum() for g in grads.values())  # BUG: replicated grads counted on every tp rank
        return torch.sqrt(all_reduce(sq, self.mesh.tp_group))


def case(world_size: int = 2):
    return mlp_case(world_size, dp=1, model=ReplicatedCountedPerRank, name="clip_replicated_counted_per_rank",
                    meta={"source": "grad norm, replicated x tp",
                          "bug_op": "aten.add", "bug_ranks": "all", "bug": "replicated-counted-per-rank",
                          "hint": r"one rank only",
                          "bug_node": "add_11", "bug_source": "clip_replicated_counted_per_rank.py:15"})
