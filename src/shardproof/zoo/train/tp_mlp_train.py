"""Training step of the tensor-parallel MLP (src/shardproof/zoo/tp_mlp.py) with Megatron's f/g
operators, on a dp x tp mesh: 2 microbatches, loss normalised by the global token count,
gradients all-reduced over dp, global-norm clipping, AdamW.

    shardproof verify src/shardproof/zoo/train/tp_mlp_train.py --world-size 4
"""
import torch

from mini_megatron import MegatronTraining, dp_shard, regression_batch, token_mean_loss
from shardproof import Case
from shardproof import AdamW, Train
from tp_mlp import HIDDEN, MLP, ParallelMLP

BATCH, SEQ = 8, 3
MESHES = ((2, 2), (1, 4), (1, 2))  # (dp, tp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class TrainParallelMLP(MegatronTraining, ParallelMLP):
    replicated = frozenset({"fc2.bias"})


def case(world_size: int = 4, dp: int = 2, model=TrainParallelMLP, train=TRAIN, name="tp_mlp_train", meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = MLP(), world_size // dp
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, tp),
                inputs=regression_batch(BATCH, SEQ, HIDDEN),
                dist_inputs=dp_shard(tp), world_size=world_size, train=train, name=name,
                meta=meta or {"source": "Megatron f/g training step"})
