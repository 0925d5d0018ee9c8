"""Bug: the loss is already normalised by the global token count (over all dp ranks), and
the gradients are then averaged over dp as well (all_reduce AVG): every gradient is dp
times too small. Expected: the first finding at the dp gradient all_reduce. (Without
clipping: a clipped gradient is the same however it was scaled, whenever clipping acts.)"""
from dataclasses import replace

import torch.distributed as dist

from mini_megatron import all_reduce
from tp_mlp_train import TRAIN, TrainParallelMLP, case as mlp_case

WORLD_SIZES = (4,)


class DoubleAverage(TrainParallelMLP):
    def reduce_gradients(self, grads):
        # BUG: AVG divides by dp a second time
        return {n: all_reduce(g, self.mesh.dp_group, op=dist.ReduceOp.AVG) for n, g in grads.items()}


def case(world_size: int = 4):
    return mlp_case(world_size, dp=world_size, model=DoubleAverage, train=replace(TRAIN, grad_clip=None),
                    name="dp_double_average",
                    meta={"source": "double loss scaling",
                          "bug_op": "_c10d_functional.all_reduce", "bug_ranks": "all", "bug": "wrong-reduce-op",
                          "hint": r"'sum', not 'avg'", "bug_line": "dist.all_reduce(t, op=op, group=group)",
                          "bug_node": "all_reduce_3", "bug_source": "mini_megatron.py"})
