"""Context parallelism: DeepSpeed-Ulysses. Q, K, V arrive sharded by sequence; an all_to_all
(one per head group / sequence chunk, ``dist.all_to_all`` over lists) trades the sequence shard for a head shard (each rank then holds cp sequence chunks of its
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
    def __init__(self, rank: int, world: int, one_buffer: bool = False):
        super().__init__()
        self.rank, self.world = rank, world
        if one_buffer:  # DeepSpeed's form: all_to_all_single over a heads-first buffer
            self.seq_to_heads, self.heads_to_seq = self.seq_to_heads_one_buffer, self.heads_to_seq_one_buffer
        self.attention = Attention(causal=True)
        self.s, self.h = SEQ // world, HEADS // world

    def seq_to_heads(self, x):
        """(B, H, s, D) sequence shard -> (B, H/cp, S, D) head shard."""
        send = [c.contiguous() for c in x.chunk(self.world, dim=1)]  # head group j, for rank j
        recv = [torch.empty_like(c) for c in send]
        dist.all_to_all(recv, send)  # recv[j]: rank j's sequence chunk of this rank's heads
        return torch.cat(recv, dim=2)

    def heads_to_seq(self, y):
        """(B, H/cp, S, D) head shard -> (B, H, s, D) sequence shard."""
        send = [c.contiguous() for c in y.chunk(self.world, dim=2)]  # chunk j: sequence chunk j, for rank j
        recv = [torch.empty_like(c) for c in send]
        dist.all_to_all(recv, send)  # recv[j]: rank j's heads of this rank's sequence chunk
        return torch.cat(recv, dim=1)

    def seq_to_heads_one_buffer(self, x):
        """seq_to_heads with all_to_all_single (one buffer, split along dim 0)."""
        send = x.permute(1, 0, 2, 3).contiguous()  # heads first: all_to_all_single splits dim 0
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)  # block j: rank j's sequence chunk of this rank's heads
        w = self.world
        return recv.view(w, self.h, BATCH, self.s, HEAD_DIM).permute(2, 1, 0, 3, 4).reshape(BATCH, self.h, SEQ, HEAD_DIM)

    def heads_to_seq_one_buffer(self, y):
        """heads_to_seq with all_to_all_single."""
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


def case(world_size: int = 2, one_buffer: bool = False, name: str = "cp_ulysses", meta: dict | None = None) -> Case:
    return Case(single=Attention(causal=True), distributed=lambda rank, world: Ulysses(rank, world, one_buffer),
                inputs=qkv_inputs(), world_size=world_size, name=name,
                meta=meta or {"source": "DeepSpeed-Ulysses (Jacobs et al. 2023)"})
