"""Training step of the DTensor tensor-parallel MLP (src/shardproof/zoo/dtensor_mlp.py:
ColwiseParallel fc1, RowwiseParallel fc2 by ``parallelize_module``) on a dp x tp device
mesh: DTensor's own collectives forward and backward, 2 microbatches, the loss normalised
by the global token count, gradients summed over dp, global-norm clipping, AdamW on the
DTensor parameters.

    shardproof verify src/shardproof/zoo/train/dtensor_mlp_train.py --world-size 4
"""
import torch

from dtensor_mlp import PLAN
from mini_dtensor import DTensorTraining, parallelize_for_training
from mini_megatron import dp_shard, regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train
from tp_mlp import HIDDEN, MLP

BATCH, SEQ = 8, 3
MESHES = ((2, 2), (1, 4))  # (dp, tp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class TrainMLP(DTensorTraining, MLP):
    pass


def parallelize(full: MLP, rank: int, world: int, tp: int, model_class=TrainMLP) -> TrainMLP:
    model = model_class()
    model.load_state_dict(full.state_dict())
    return parallelize_for_training(model, world, tp, PLAN)


def case(world_size: int = 4, dp: int = 2, model=TrainMLP, train=TRAIN, name="dtensor_mlp_train", meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = MLP(), world_size // dp
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world, tp, model),
                inputs=regression_batch(BATCH, SEQ, HIDDEN), dist_inputs=dp_shard(tp), world_size=world_size,
                train=train, name=name, meta=meta or {"source": "DTensor parallelize_module training step"})
