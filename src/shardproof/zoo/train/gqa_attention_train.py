"""Training step of the grouped-query attention with a fused QKV projection
(src/shardproof/zoo/gqa_attention.py) with Megatron's f/g operators, on a dp x tp mesh: the
fused ``qkv`` rows re-fused per rank ([q_r | k_r | v_r], sections of different sizes), 2
microbatches, loss normalised by the global token count, dp gradient all_reduce, global-norm
clipping, AdamW. With 4 KV heads and tp 2 or 4 every tp rank holds whole KV heads (2 or 1),
so the fused projection's gradient is laid out exactly as its weight.

    shardproof verify src/shardproof/zoo/train/gqa_attention_train.py --world-size 4
"""
import torch

from gqa_attention import HIDDEN, SEQ, GQAAttention, ParallelGQAAttention
from mini_megatron import MegatronTraining, dp_shard, regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train

BATCH = 4
MESHES = ((2, 2), (1, 4))  # (dp, tp)
# the key bias's gradient is exactly zero (softmax ignores a shift of the scores); AdamW divides its
# rounding noise by eps, so a larger eps keeps the numeric cross-check well-conditioned
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2, eps=1e-6), microbatches=2, grad_clip=0.5)


class TrainParallelGQAAttention(MegatronTraining, ParallelGQAAttention):
    replicated = frozenset({"o_proj.bias"})


def case(world_size: int = 4, dp: int = 2, model=TrainParallelGQAAttention, train=TRAIN, name="gqa_attention_train",
         meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = GQAAttention(), world_size // dp
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, tp),
                inputs=regression_batch(BATCH, SEQ, HIDDEN),
                dist_inputs=dp_shard(tp), world_size=world_size, train=train, name=name,
                meta=meta or {"source": "Megatron TP GQA attention training step (fused QKV)"})
