"""The tensor-parallel MLP's training step with gradients averaged over dp (each dp rank's
loss normalised by its share of the tokens, then all_reduce and a division by the dp
group's size): the correct twin of src/shardproof/zoo/train/bugs/replicated_grad_wrong_group.py.

    shardproof verify src/shardproof/zoo/train/tp_mlp_train_averaged.py --world-size 4
"""
from mini_megatron import all_reduce
from tp_mlp_train import TrainParallelMLP, case as mlp_case

MESHES = ((2, 2),)


class AveragedGradients(TrainParallelMLP):
    def microbatch_loss(self, mb, total_tokens, train):
        return super().microbatch_loss(mb, total_tokens / self.mesh.dp, train)

    def group_size(self, name):
        """The size of the group that holds the pieces of `name`'s gradient (dp)."""
        return self.mesh.dp

    def reduce_gradients(self, grads):
        return {n: all_reduce(g, self.mesh.dp_group) / self.group_size(n) for n, g in grads.items()}

    def result(self, loss, params, grads, state, train):
        return super().result(loss / self.mesh.dp, params, grads, state, train)


def case(world_size: int = 4, dp: int = 2, model=AveragedGradients, name="tp_mlp_train_averaged", meta=None):
    return mlp_case(world_size, dp=dp, model=model, name=name, meta=meta or {"source": "DDP-style dp averaging"})
