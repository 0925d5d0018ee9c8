"""Bug (issue 17, "Megatron's f without its backward all_reduce"): a residual block
``h = proj(x); out = h + mlp(h)`` whose tensor-parallel MLP is entered through an f operator
that is the identity both ways -- its backward all_reduce over tp is missing. Forward values
are all correct; the gradient of h is the residual's (whole on every rank) plus each rank's
*partial* sum through its MLP columns, so proj's gradients are wrong on every rank. (Unlike
column_parallel_input_grad, no LayerNorm sits between: the partial gradient meets the
residual's in the gradient accumulation of h, which autograd makes, not a forward line.)
Expected: the first finding at the backward of fc1's input (its forward line, not the
``autograd.grad`` call), classed missing-gradient-reduction, with a hint that says to
all_reduce the gradient in the backward of f."""
import torch
from torch import nn
import torch.nn.functional as F

from mini_megatron import MegatronTraining, dp_shard, regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train
from tensor_parallel import TensorParallel
from tp_mlp import FFN, HIDDEN, MLP
from verdict05_missing_backward_reduce_fused_qkv import IdentityBothWays  # BUG: f, no backward all_reduce

WORLD_SIZES = (2,)
BATCH, SEQ = 4, 3
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=1)


class ResidualMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.mlp = MLP()

    def forward(self, x):
        h = self.proj(x)
        return h + self.mlp(h)


class ParallelResidual(TensorParallel):
    """proj replicated; the MLP's fc1 column parallel and fc2 row parallel (as tp_mlp)."""

    def __init__(self, full: ResidualMLP, rank: int, world: int):
        super().__init__()
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.proj.load_state_dict(full.proj.state_dict())
        self.mlp = nn.Module()
        self.mlp.fc1, self.mlp.fc2 = nn.Linear(HIDDEN, FFN // world), nn.Linear(FFN // world, HIDDEN)
        with torch.no_grad():
            self.mlp.fc1.weight.copy_(full.mlp.fc1.weight.chunk(world, 0)[rank])
            self.mlp.fc1.bias.copy_(full.mlp.fc1.bias.chunk(world, 0)[rank])
            self.mlp.fc2.weight.copy_(full.mlp.fc2.weight.chunk(world, 1)[rank])
            self.mlp.fc2.bias.copy_(full.mlp.fc2.bias)

    def forward(self, x):
        h = self.proj(x)
        a = F.gelu(self.mlp.fc1(self.enter_tp(h)))  # the column-parallel input: f goes here
        return h + self.reduce_tp(F.linear(a, self.mlp.fc2.weight)) + self.mlp.fc2.bias


class TrainParallelResidual(MegatronTraining, ParallelResidual):
    """The correct step: Megatron's f (mini_megatron.CopyToTensorParallel) all-reduces the gradient."""
    replicated = frozenset({"proj.weight", "proj.bias", "mlp.fc2.bias"})


class MissingFBackward(TrainParallelResidual):
    def enter_tp(self, x):
        return IdentityBothWays.apply(x, self.mesh.tp_group)


def case(world_size: int = 2, dp: int = 1, model=MissingFBackward):
    torch.manual_seed(0)
    full, tp = ResidualMLP(), world_size // dp
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, tp),
                inputs=regression_batch(BATCH, SEQ, HIDDEN), dist_inputs=dp_shard(tp), world_size=world_size,
                train=TRAIN, name="megatron_f_missing_backward_allreduce",
                meta={"source": "issue 17: Megatron f operator without its backward all_reduce",
                      "bug_op": "aten.mm", "bug_ranks": "all", "bug": "missing-gradient-reduction", "bug_node": "mm_3",
                      "bug_source": "megatron_f_missing_backward_allreduce.py:", "bug_line": "f goes here",
                      "hint": r"all_reduce.*backward", "hint_not": r"one rank only"})
