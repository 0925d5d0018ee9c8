"""A training step of an MLP under PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``),
data parallel over every rank, as torchtitan trains (see mini_fsdp.py): each linear layer
is its own FSDP unit, every parameter is held as its dim-0 chunk (uneven sizes: FSDP pads
the short shards), all-gathered before use, and its gradient reduce-scattered (summed:
the loss is normalised by the global token count) in backward; 2 microbatches accumulate
into ``.grad``; AdamW updates each rank's shard.

    shardproof verify src/shardproof/zoo/train/fsdp2_mlp_train.py --world-size 4
"""
import torch

from mini_fsdp import FSDPTraining, data_shard
from mini_megatron import regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train
from tp_mlp import MLP

HIDDEN, FFN, BATCH, SEQ = 10, 14, 8, 3  # dim 0 of 14 and 10 split unevenly over 4 ranks
MESHES = ((2, 1), (4, 1))  # (dp, tp): FSDP over every rank
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2)


class FSDPMLP(FSDPTraining, MLP):
    def __init__(self, full: MLP, world: int):
        MLP.__init__(self, full.fc1.in_features, full.fc1.out_features)
        self.load_state_dict(full.state_dict())
        self.shard((self.fc1, self.fc2), world)


def case(world_size: int = 4, dp: int | None = None, model=FSDPMLP, train=TRAIN, name="fsdp2_mlp_train",
         meta=None) -> Case:
    torch.manual_seed(0)
    full = MLP(HIDDEN, FFN)
    return Case(single=full, distributed=lambda rank, world: model(full, world),
                inputs=regression_batch(BATCH, SEQ, HIDDEN), dist_inputs=data_shard, world_size=world_size,
                train=train, name=name, meta=meta or {"source": "PyTorch FSDP2 fully_shard (torchtitan-style step)"})
