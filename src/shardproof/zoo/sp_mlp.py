"""Megatron sequence parallelism around the tensor-parallel MLP block.

The activations x [seq, batch, hidden] are sharded along the sequence (dim 0). Each rank
applies the (replicated) LayerNorm to its sequence shard, all-gathers along the sequence,
runs column-parallel fc1, GELU, row-parallel fc2, then reduce-scatters along the sequence
and adds the fc2 bias and the residual on its local shard. The output stays sequence-
sharded: the tool should prove Shard(0).

    shardproof verify src/shardproof/zoo/sp_mlp.py --world-size 4
"""
import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F

from shardproof import Case

SEQ, BATCH, HIDDEN, FFN = 24, 2, 8, 48
WORLD_SIZES = (2, 3, 4, 6, 8)


class Block(nn.Module):
    def __init__(self, hidden=HIDDEN, ffn=FFN):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        with torch.no_grad():
            nn.init.normal_(self.ln.weight)
            nn.init.normal_(self.ln.bias)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class SequenceParallelBlock(nn.Module):
    """LayerNorm replicated; fc1 column parallel (rows r), fc2 row parallel (columns r)."""

    def __init__(self, full: Block, rank: int, world: int):
        super().__init__()
        self.world = world
        self.ln = nn.LayerNorm(HIDDEN)
        self.fc1 = nn.Linear(HIDDEN, FFN // world)
        self.fc2 = nn.Linear(FFN // world, HIDDEN)
        with torch.no_grad():
            self.ln.weight.copy_(full.ln.weight)
            self.ln.bias.copy_(full.ln.bias)
            self.fc1.weight.copy_(full.fc1.weight.chunk(world, 0)[rank])
            self.fc1.bias.copy_(full.fc1.bias.chunk(world, 0)[rank])
            self.fc2.weight.copy_(full.fc2.weight.chunk(world, 1)[rank])
            self.fc2.bias.copy_(full.fc2.bias)

    def gather_sequence(self, h):
        s, b, d = h.shape
        total = torch.empty(s * self.world, b, d, dtype=h.dtype, device=h.device)
        dist.all_gather_into_tensor(total, h.contiguous())
        return total

    def scatter_sequence(self, y):
        s, b, d = y.shape
        out = torch.empty(s // self.world, b, d, dtype=y.dtype, device=y.device)
        dist.reduce_scatter_tensor(out, y.contiguous())
        return out

    def forward(self, x):
        h = self.ln(x)
        h = self.gather_sequence(h)
        h = F.gelu(self.fc1(h))
        y = F.linear(h, self.fc2.weight)
        y = self.scatter_sequence(y)
        return x + (y + self.fc2.bias)


def shard_sequence(rank, world, inputs):
    return {"x": inputs["x"].chunk(world, dim=0)[rank]}


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Block()
    return Case(single=full, distributed=lambda rank, world: SequenceParallelBlock(full, rank, world),
                inputs={"x": torch.randn(SEQ, BATCH, HIDDEN)}, dist_inputs=shard_sequence,
                world_size=world_size, name="sp_mlp", meta={"source": "Megatron sequence parallel"},
                expect={"out": "Shard(0)"})
