"""Context parallelism: DeepSpeed-Ulysses with grouped-query attention (8 query heads, 2 KV
heads, causal). Q, K, V arrive sharded by sequence; all_to_alls over lists trade the sequence
shard for a head shard. Each rank's query heads must meet their own KV heads: at cp 2 the KV
heads split over cp as the query heads do (rank r keeps KV head r, the one its 4 query heads
share) and are repeated after the all_to_all; at cp 4 there are fewer KV heads than ranks, so
each KV head is repeated (interleaved, head j -> heads 2j, 2j+1) *before* the split, and every
rank receives the one replica its query heads share. Full-sequence attention on the head
shard, a second all_to_all trades back, and the output blocks are all_gathered.

    shardproof verify src/shardproof/zoo/cp/cp_ulysses_gqa.py --world-size 4
"""
import math

import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case

WORLD_SIZES = (2, 4)
BATCH, HEADS, KV_HEADS, SEQ, HEAD_DIM = 1, 8, 2, 8, 4


def gqa_inputs(seed: int = 0, kv_heads: int = KV_HEADS) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"q": torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, generator=g),
            "k": torch.randn(BATCH, kv_heads, SEQ, HEAD_DIM, generator=g),
            "v": torch.randn(BATCH, kv_heads, SEQ, HEAD_DIM, generator=g)}


def attend(q, k, v):
    """Causal softmax attention of q's heads on k/v's heads, each KV head shared by a group of
    consecutive query heads (k, v repeated interleaved)."""
    n_rep = q.shape[1] // k.shape[1]
    k, v = (x.repeat_interleave(n_rep, dim=1) for x in (k, v))
    s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(HEAD_DIM))
    n = q.shape[2]
    pos = torch.arange(n)
    s = s.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
    return torch.softmax(s, dim=-1) @ v


class Attention(nn.Module):
    def forward(self, q, k, v):
        return attend(q, k, v)


class UlyssesGQA(nn.Module):
    def __init__(self, rank: int, world: int, bug: str = ""):
        super().__init__()
        self.rank, self.world, self.bug = rank, world, bug

    def head_chunks(self, x, kv: bool):
        """The head groups rank j receives: consecutive heads, chunk j of cp."""
        return list(x.chunk(self.world, dim=1))

    def widen_kv(self, x):
        """Fewer KV heads than ranks: each repeated (interleaved) so that cp divides them."""
        if x.shape[1] % self.world == 0:
            return x
        return x.repeat_interleave(self.world // x.shape[1], dim=1)

    def seq_to_heads(self, x, kv: bool = False):
        """(B, H, s, D) sequence shard -> (B, H/cp, S, D) head shard."""
        send = [c.contiguous() for c in self.head_chunks(x, kv)]
        recv = [torch.empty_like(c) for c in send]
        dist.all_to_all(recv, send)  # recv[j]: rank j's sequence chunk of this rank's heads
        return torch.cat(recv, dim=2)

    def heads_to_seq(self, y):
        """(B, H/cp, S, D) head shard -> (B, H, s, D) sequence shard."""
        send = [c.contiguous() for c in y.chunk(self.world, dim=2)]
        recv = [torch.empty_like(c) for c in send]
        dist.all_to_all(recv, send)
        return torch.cat(recv, dim=1)

    def forward(self, q, k, v):
        q, k, v = (x.chunk(self.world, dim=2)[self.rank] for x in (q, k, v))
        k, v = self.widen_kv(k), self.widen_kv(v)
        out = self.heads_to_seq(attend(self.seq_to_heads(q), self.seq_to_heads(k, True), self.seq_to_heads(v, True)))
        blocks = [torch.empty_like(out) for _ in range(self.world)]
        dist.all_gather(blocks, out.contiguous())
        return torch.cat(blocks, dim=2)


def case(world_size: int = 2, model=UlyssesGQA, name: str = "cp_ulysses_gqa", meta: dict | None = None,
         kv_heads: int = KV_HEADS) -> Case:
    return Case(single=Attention(), distributed=lambda rank, world: model(rank, world),
                inputs=gqa_inputs(kv_heads=kv_heads), world_size=world_size, name=name,
                meta=meta or {"source": "DeepSpeed-Ulysses with grouped-query attention (KV heads repeated when "
                                        "fewer than the ranks)"})
