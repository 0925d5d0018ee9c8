"""Switching from tensor-parallel to batch-parallel with one all_to_all (as transformers-neuronx
does after a column-parallel projection when it shards over batch). Activations are
sequence-first, (seq, batch, features). Each rank computes its feature block for the whole
batch, moves batch to dim 0 (all_to_all_single splits dim 0), exchanges, and reassembles its
batch shard with every feature block: the output is Shard(1) (batch) of the single-device one.

The all_to_all's receive buffer has a dim 0 that fuses (source rank = feature block, local
batch row): no single layout of the single-device output describes it, so the engine keeps it
as a map of positions, which the view/permute that reassembles the batch shard composes back to
a plain selection.

    shardproof verify src/shardproof/zoo/batch_all_to_all.py --world-size 4
"""
import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F

from shardproof import Case

SEQ, BATCH, HIDDEN, FFN = 8, 4, 16, 32
WORLD_SIZES = (2, 4)


class Projection(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(HIDDEN, FFN, bias=False)

    def forward(self, x):
        return self.proj(x)


class TensorToBatchParallel(nn.Module):
    def __init__(self, full: Projection, rank: int, world: int):
        super().__init__()
        self.weight = nn.Parameter(full.proj.weight.detach().chunk(world, 0)[rank].clone())
        self.world = world

    def to_split_dim(self, y):
        """all_to_all_single splits dim 0: bring the batch dim there."""
        return y.transpose(0, 1).contiguous()

    def forward(self, x):
        y = F.linear(x, self.weight)  # (seq, batch, ffn / world): this rank's feature block
        send = self.to_split_dim(y)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)  # block j of recv: rank j's features for this rank's batch
        w, b = self.world, BATCH // self.world
        return recv.view(w, b, SEQ, FFN // w).permute(2, 1, 0, 3).reshape(SEQ, b, FFN)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Projection()
    return Case(single=full, distributed=lambda rank, world: TensorToBatchParallel(full, rank, world),
                inputs={"x": torch.randn(SEQ, BATCH, HIDDEN)}, world_size=world_size, name="batch_all_to_all",
                meta={"source": "transformers-neuronx shard-over-batch all_to_all (PR 108/109)"},
                expect={"out": "Shard(1)"})
