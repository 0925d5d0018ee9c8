"""Training step of the tensor-parallel causal attention (src/shardproof/zoo/tp_attention.py)
with Megatron's f/g operators, on a dp x tp mesh: heads split over tp (q/k/v rows,
out_proj columns), 2 microbatches, loss normalised by the global token count, dp gradient
all_reduce, global-norm clipping, AdamW.

    shardproof verify src/shardproof/zoo/train/tp_attention_train.py --world-size 4
"""
import torch

from mini_megatron import MegatronTraining, dp_shard, regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train
from tp_attention import HIDDEN, SEQ, Attention, ParallelAttention

BATCH = 4
MESHES = ((2, 2), (1, 4))  # (dp, tp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class TrainParallelAttention(MegatronTraining, ParallelAttention):
    replicated = frozenset({"out_proj.bias"})


def case(world_size: int = 4, dp: int = 2, model=TrainParallelAttention, train=TRAIN, name="tp_attention_train",
         meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = Attention(), world_size // dp
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, tp),
                inputs=regression_batch(BATCH, SEQ, HIDDEN),
                dist_inputs=dp_shard(tp), world_size=world_size, train=train, name=name,
                meta=meta or {"source": "Megatron TP attention training step"})
