"""Training step of a lone row-parallel linear layer under Megatron's conventions
(``RowParallelLinear(input_is_parallel=True)``): each rank reads its own slice of the input
features (the output of an earlier column-parallel layer), multiplies by its column block of
the weight, and Megatron's g operator all-reduces the partial outputs; the bias is added once,
after the reduction.

A correct program that naive checkers reject: the forward has an all_reduce, and the layer's
backward has *no* collective at all -- g's backward is the identity, the weight gradient is the
rank's exact column block (grad_out^T @ its own input slice) and the input gradient is the
rank's exact slice of the single-device one (grad_out @ its weight block). A checker that
pairs every forward collective with a backward one, or that expects the gradient of an
all-reduced output to be reduced again, flags the missing backward collective. It must verify.

    shardproof verify src/shardproof/zoo/train/row_parallel_train.py --world-size 2
"""
import torch
from torch import nn
import torch.nn.functional as F

from mini_megatron import MegatronTraining, regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train
from tensor_parallel import TensorParallel

BATCH, SEQ, IN_FEATURES, OUT_FEATURES = 4, 4, 16, 8
MESHES = ((1, 2), (2, 2))  # (dp, tp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class Projection(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(IN_FEATURES, OUT_FEATURES)

    def forward(self, x):
        return self.proj(x)


class RowParallelProjection(TensorParallel):
    """Rank r: columns [r*IN/W, (r+1)*IN/W) of the weight, the whole bias; input features sliced alike."""

    def __init__(self, full: Projection, rank: int, world: int):
        super().__init__()
        self.proj = nn.Linear(IN_FEATURES // world, OUT_FEATURES)
        with torch.no_grad():
            self.proj.weight.copy_(full.proj.weight.chunk(world, 1)[rank])
            self.proj.bias.copy_(full.proj.bias)

    def forward(self, x):
        return self.reduce_tp(F.linear(x, self.proj.weight)) + self.proj.bias


class TrainRowParallelProjection(MegatronTraining, RowParallelProjection):
    replicated = frozenset({"proj.bias"})


def parallel_input(tp: int):
    """``dist_inputs``: rank r takes the (r // tp)-th chunk of the batch, and of `x` the
    (r % tp)-th slice of the features (the layer's input is already parallel)."""
    def shard(rank, world, inputs):
        out = {k: v.chunk(world // tp, 0)[rank // tp] for k, v in inputs.items()}
        out["x"] = out["x"].chunk(tp, -1)[rank % tp]
        return out
    return shard


def case(world_size: int = 2, dp: int = 1, model=TrainRowParallelProjection, train=TRAIN,
         name="row_parallel_train", meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = Projection(), world_size // dp
    inputs = regression_batch(BATCH, SEQ, OUT_FEATURES)
    inputs["x"] = torch.randn(BATCH, SEQ, IN_FEATURES)
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, tp), inputs=inputs,
                dist_inputs=parallel_input(tp), world_size=world_size, train=train, name=name,
                relations={"x": f"Mesh([{dp}, {tp}], (Shard(0), Shard(2)))"},  # a piece on two dims: stated
                meta=meta or {"source": "Megatron RowParallelLinear(input_is_parallel=True): no backward collective"})
