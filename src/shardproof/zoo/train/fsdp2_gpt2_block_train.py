"""A training step of the GPT-2 block (src/shardproof/zoo/gpt2_block.py) under PyTorch FSDP2
(``fully_shard``), data parallel over every rank, torchtitan-style (see mini_fsdp.py): the
attention and the MLP are FSDP units, the layer norms stay with the root unit; 2
microbatches, AdamW (mini_fsdp.py does not clip).

    shardproof verify src/shardproof/zoo/train/fsdp2_gpt2_block_train.py --world-size 4
"""
import torch

from gpt2_block import GPT2Block
from gpt2_block_train import BATCH, SEQ, SMALL_HEADS, SMALL_HIDDEN
from mini_fsdp import FSDPTraining, data_shard
from mini_megatron import regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train

MESHES = ((4, 1),)  # (dp, tp): FSDP over every rank
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2)


class FSDPGPT2Block(FSDPTraining, GPT2Block):
    def __init__(self, full: GPT2Block, world: int):
        GPT2Block.__init__(self, full.hidden, full.heads, full.c_fc.out_features)
        self.load_state_dict(full.state_dict())
        self.shard((self.c_attn, self.c_proj, self.c_fc, self.mlp_proj), world)


def case(world_size: int = 4, dp: int | None = None, model=FSDPGPT2Block, train=TRAIN,
         name="fsdp2_gpt2_block_train", meta=None) -> Case:
    torch.manual_seed(0)
    full = GPT2Block(SMALL_HIDDEN, SMALL_HEADS, 4 * SMALL_HIDDEN)
    return Case(single=full, distributed=lambda rank, world: model(full, world),
                inputs=regression_batch(BATCH, SEQ, SMALL_HIDDEN), dist_inputs=data_shard, world_size=world_size,
                train=train, name=name, meta=meta or {"source": "PyTorch FSDP2 fully_shard (torchtitan-style step)"})
