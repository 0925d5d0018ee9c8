"""Training step of the DTensor tensor-parallel Llama block (src/shardproof/zoo/dtensor_llama_block.py:
torchtitan's plan by ``parallelize_module``; RMSNorm weights replicated plain parameters) on
a dp x tp device mesh: DTensor's own collectives forward and backward (the input gradient of
the column-parallel projections is all-reduced by DTensor's redistribution), 2 microbatches,
the loss normalised by the global token count, gradients summed over dp, global-norm
clipping, AdamW. With 4 KV heads and tp 2 or 4, every rank holds whole KV heads.

    shardproof verify src/shardproof/zoo/train/dtensor_llama_block_train.py --world-size 4
"""
import torch

from dtensor_llama_block import LocalHeadsLlamaBlock, plan
from llama_block import LlamaBlock
from mini_dtensor import DTensorTraining, parallelize_for_training
from mini_megatron import dp_shard, regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train

BATCH, SEQ, SMALL_HIDDEN, SMALL_HEADS, SMALL_KV_HEADS, SMALL_FFN = 4, 4, 16, 8, 4, 32
MESHES = ((2, 2), (1, 4))  # (dp, tp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class TrainLlamaBlock(DTensorTraining, LocalHeadsLlamaBlock):
    pass


def parallelize(full: LlamaBlock, rank: int, world: int, tp: int) -> TrainLlamaBlock:
    model = TrainLlamaBlock(full.wq.in_features, full.n_heads, full.n_kv_heads, full.w1.out_features)
    model.load_state_dict(full.state_dict())
    model.q_head_offset = (rank % tp) * (full.n_heads // tp)
    return parallelize_for_training(model, world, tp, plan(full.n_kv_heads, tp))


def case(world_size: int = 4, dp: int = 2, train=TRAIN, name="dtensor_llama_block_train", meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = LlamaBlock(SMALL_HIDDEN, SMALL_HEADS, SMALL_KV_HEADS, SMALL_FFN), world_size // dp
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world, tp),
                inputs=regression_batch(BATCH, SEQ, SMALL_HIDDEN), dist_inputs=dp_shard(tp), world_size=world_size,
                train=train, name=name, meta=meta or {"source": "DTensor parallelize_module (torchtitan plan) training step"})
