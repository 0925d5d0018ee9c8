"""Bug: dp rank 1 all-reduces its gradients over its own (size-1) tensor-parallel group instead
of the data-parallel group. Its ops are rank 0's, only a collective's group differs, so both
ranks are one class (groups are the class's parameters): rank 1's graph is derived with its own
group, and the mismatch must still be found (issue 16). On gloo, rank 0 waits for a partner that
never joins (a hang)."""
from mb4_mlp_train import case as mb4_case
from mini_megatron import all_reduce
from tp_mlp_train import TrainParallelMLP

WORLD_SIZES = (2,)


class Rank1WrongGroup(TrainParallelMLP):
    def reduce_gradients(self, grads):
        group = self.mesh.tp_group if self.mesh.dp_rank == 1 else self.mesh.dp_group  # BUG: rank 1's group
        return {n: all_reduce(g, group) for n, g in grads.items()}


def case(world_size: int = 2):
    return mb4_case(world_size, model=Rank1WrongGroup, name="mb4_mlp_train_rank1_wrong_group")
