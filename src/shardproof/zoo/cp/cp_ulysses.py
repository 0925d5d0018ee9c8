"""Context parallelism: DeepSpeed-Ulysses. Q, K, V arrive sharded by sequence; an all_to_all
trades the sequence shard for a head shard (each rank then holds cp sequence chunks of its
heads), full-sequence causal attention runs on those heads, and a second all_to_all trades
back; the output blocks are all_gathered into the whole sequence.

    shardproof verify src/shardproof/zoo/cp/cp_ulysses.py --world-size 2
"""
import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case
from _cp_ring import BATCH, HEAD_DIM, HEADS, SEQ, Attention, qkv_inputs

WORLD_SIZES = (2, 4)


class Ulysses(nn.Module):
    def __init__(self, rank: int, world: int, bug: str = ""):
        super().__init__()
        self.rank, self.world, self.bug = rank, world, bug
        self.attention = Attention(causal=True)
        self.s, self.h = SEQ // world, HEADS // world

    def seq_to_heads(self, x):
        """(B, H, s, D) sequence shard -> (B, H/cp, S, D) head shard."""
        send = x.permute(1, 0, 2, 3).contiguous()  # heads first: all_to_all_single splits dim 0
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)  # block j: rank j's sequence chunk of this rank's heads
        w = self.world
        return recv.view(w, self.h, BATCH, self.s, HEAD_DIM).permute(2, 1, 0, 3, 4).reshape(BATCH, self.h, SEQ, HEAD_DIM)

    def heads_to_seq(self, y):
        """(B, H/cp, S, D) head shard -> (B, H, s, D) sequence shard."""
        w = self.world
        send = y.view(BATCH, self.h, w, self.s, HEAD_DIM).permute(2, 1, 0, 3, 4).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)  # block j: rank j's heads of this rank's sequence chunk
        return recv.reshape(HEADS, BATCH, self.s, HEAD_DIM).permute(1, 0, 2, 3)

    def forward(self, q, k, v):
        q, k, v = (x.chunk(self.world, dim=2)[self.rank] for x in (q, k, v))
        out = self.heads_to_seq(self.attention(*(self.seq_to_heads(x) for x in (q, k, v))))
        blocks = [torch.empty_like(out) for _ in range(self.world)]
        dist.all_gather(blocks, out.contiguous())
        return torch.cat(blocks, dim=2)


def case(world_size: int = 2) -> Case:
    return Case(single=Attention(causal=True), distributed=lambda rank, world: Ulysses(rank, world),
                inputs=qkv_inputs(), world_size=world_size, name="cp_ulysses",
                meta={"source": "DeepSpeed-Ulysses (Jacobs et al. 2023)",
                      "known_gap": "the all_to_all back to sequence shards (relations stop at the aten.view "
                                   "before it at cp 2, at the head shard's aten.bmm at cp 4)"})
