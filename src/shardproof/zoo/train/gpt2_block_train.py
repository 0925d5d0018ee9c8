"""Training step of the Megatron tensor-parallel GPT-2 block (src/shardproof/zoo/gpt2_block.py) on a
dp x tp mesh: f/g operators around attention and MLP, 2 microbatches, loss normalised by
the global token count, dp gradient all_reduce, global-norm clipping, AdamW.

    shardproof verify src/shardproof/zoo/train/gpt2_block_train.py --world-size 4
"""
import torch

from gpt2_block import GPT2Block, ParallelGPT2Block
from mini_megatron import MegatronTraining, dp_shard, regression_batch, token_mean_loss
from shardproof import Case
from shardproof import AdamW, Train

BATCH, SEQ, SMALL_HIDDEN, SMALL_HEADS = 8, 4, 16, 4
MESHES = ((2, 2), (1, 4))  # (dp, tp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class TrainParallelGPT2Block(MegatronTraining, ParallelGPT2Block):
    replicated = frozenset({"ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "c_proj.bias", "mlp_proj.bias"})


def case(world_size: int = 4, dp: int = 2, model=TrainParallelGPT2Block, train=TRAIN, name="gpt2_block_train",
         meta=None) -> Case:
    torch.manual_seed(0)
    full, tp = GPT2Block(SMALL_HIDDEN, SMALL_HEADS, 4 * SMALL_HIDDEN), world_size // dp
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, tp),
                inputs=regression_batch(BATCH, SEQ, SMALL_HIDDEN),
                dist_inputs=dp_shard(tp), world_size=world_size, train=train, name=name,
                meta=meta or {"source": "Megatron TP GPT-2 training step"})
