"""Training step of the DTensor tensor-parallel GPT-2 block (src/shardproof/zoo/dtensor_gpt2_block.py:
fused c_attn rows regrouped per head group, then ColwiseParallel c_attn/c_fc and RowwiseParallel
c_proj/mlp_proj by ``parallelize_module``; LayerNorms and biases after the row-parallel layers
replicated) on a dp x tp device mesh: DTensor's own collectives forward and backward, 2
microbatches, the loss normalised by the global token count, gradients summed over dp,
global-norm clipping, AdamW.

    shardproof verify src/shardproof/zoo/train/dtensor_gpt2_block_train.py --world-size 4
"""
import torch

from dtensor_gpt2_block import PLAN, LocalHeadsGPT2Block, group_qkv_rows
from gpt2_block import GPT2Block
from mini_dtensor import DTensorTraining, parallelize_for_training
from mini_megatron import dp_shard, regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train

BATCH, SEQ = 4, 4
MESHES = ((2, 2), (1, 4))  # (dp, tp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class TrainGPT2Block(DTensorTraining, LocalHeadsGPT2Block):
    pass


def parallelize(full: GPT2Block, rank: int, world: int, tp: int) -> TrainGPT2Block:
    model = TrainGPT2Block(full.hidden, full.heads, full.c_fc.out_features)
    model.load_state_dict(full.state_dict())
    with torch.no_grad():
        model.c_attn.weight.copy_(group_qkv_rows(full.c_attn.weight, tp))
        model.c_attn.bias.copy_(group_qkv_rows(full.c_attn.bias, tp))
    return parallelize_for_training(model, world, tp, PLAN)


def case(world_size: int = 4, dp: int = 2, train=TRAIN, name="dtensor_gpt2_block_train", meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = GPT2Block(), world_size // dp
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world, tp),
                inputs=regression_batch(BATCH, SEQ, full.hidden), dist_inputs=dp_shard(tp), world_size=world_size,
                train=train, name=name, meta=meta or {"source": "DTensor parallelize_module training step"})
