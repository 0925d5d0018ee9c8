"""Training step of the Megatron tensor-parallel Llama block (src/shardproof/zoo/llama_block.py) on a
dp x tp mesh: f/g operators around attention (GQA) and the SwiGLU MLP, 2 microbatches,
loss normalised by the global token count, dp gradient all_reduce, global-norm clipping,
AdamW. The small configuration has as many KV heads as tp ranks (each rank's query heads
and their KV head are all local, so the KV projections' gradients are whole).

    shardproof verify src/shardproof/zoo/train/llama_block_train.py --world-size 4
"""
import torch

from llama_block import LlamaBlock, ParallelLlamaBlock
from mini_megatron import MegatronTraining, dp_shard, regression_batch, token_mean_loss
from shardproof import Case
from shardproof import AdamW, Train

BATCH, SEQ, SMALL_HIDDEN, SMALL_HEADS, SMALL_KV_HEADS, SMALL_FFN = 4, 4, 16, 8, 4, 32
MESHES = ((2, 2), (1, 4))  # (dp, tp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class TrainParallelLlamaBlock(MegatronTraining, ParallelLlamaBlock):
    replicated = frozenset({"attention_norm.weight", "ffn_norm.weight"})


def case(world_size: int = 4, dp: int = 2, model=TrainParallelLlamaBlock, train=TRAIN, name="llama_block_train",
         meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = LlamaBlock(SMALL_HIDDEN, SMALL_HEADS, SMALL_KV_HEADS, SMALL_FFN), world_size // dp
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, tp),
                inputs=regression_batch(BATCH, SEQ, SMALL_HIDDEN),
                dist_inputs=dp_shard(tp), world_size=world_size, train=train, name=name,
                meta=meta or {"source": "Megatron TP Llama training step"})
