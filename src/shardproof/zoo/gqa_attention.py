"""Grouped-query causal self-attention with a fused QKV projection, tensor parallel.

The fused ``qkv`` Linear(h, (Hq + 2*Hkv) * d) has sections of *different* sizes [q | k | v]
(16 query heads, 4 KV heads). Rank r holds [q_r | k_r | v_r], re-fused; when the world size
exceeds the KV head count, KV head ``r * Hkv // W`` is replicated to the ranks that need it.
Output projection is row-parallel + all_reduce, bias added once. The k/v heads of the fused
term sit after all query heads: query head p attends with k/v position ``Hq + p // (Hq/Hkv)``
of that term, a pairing each rank's heads fit.

    shardproof verify src/shardproof/zoo/gqa_attention.py --world-size 4
"""
import torch
from torch import nn
import torch.nn.functional as F

from shardproof import Case
from tensor_parallel import TensorParallel

HIDDEN, N_HEADS, N_KV_HEADS, SEQ, BATCH = 48, 16, 4, 6, 2
HEAD_DIM = HIDDEN // N_HEADS
Q_SIZE, KV_SIZE = N_HEADS * HEAD_DIM, N_KV_HEADS * HEAD_DIM
WORLD_SIZES = (2, 4, 8)


def repeat_kv(x, n_rep):
    b, n_kv, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, n_kv, n_rep, s, d).reshape(b, n_kv * n_rep, s, d)


class GQAAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, Q_SIZE + 2 * KV_SIZE)
        self.o_proj = nn.Linear(Q_SIZE, HIDDEN)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split([Q_SIZE, KV_SIZE, KV_SIZE], dim=-1)
        q = q.view(b, s, N_HEADS, HEAD_DIM).transpose(1, 2)
        k = k.view(b, s, N_KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = v.view(b, s, N_KV_HEADS, HEAD_DIM).transpose(1, 2)
        n_rep = N_HEADS // N_KV_HEADS
        o = F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, Q_SIZE))


class ParallelGQAAttention(TensorParallel):
    def __init__(self, full: GQAAttention, rank: int, world: int):
        super().__init__()
        self.local_heads = N_HEADS // world
        self.local_kv_heads = max(N_KV_HEADS // world, 1)
        self.q_local, self.kv_local = self.local_heads * HEAD_DIM, self.local_kv_heads * HEAD_DIM
        self.qkv = nn.Linear(HIDDEN, self.q_local + 2 * self.kv_local)
        self.o_proj = nn.Linear(self.q_local, HIDDEN)
        with torch.no_grad():
            self.qkv.weight.copy_(self.local_fused(full.qkv.weight, rank, world))
            self.qkv.bias.copy_(self.local_fused(full.qkv.bias, rank, world))
            self.o_proj.weight.copy_(full.o_proj.weight.chunk(world, 1)[rank])
            self.o_proj.bias.copy_(full.o_proj.bias)

    def sections(self, fused):
        """The fused tensor's q, k, v sections (dim 0)."""
        return fused.split([Q_SIZE, KV_SIZE, KV_SIZE], dim=0)

    def local_fused(self, fused, rank, world):
        q, k, v = self.sections(fused)
        if world <= N_KV_HEADS:
            return torch.cat([t.chunk(world, 0)[rank] for t in (q, k, v)], 0)
        kv_head = rank * N_KV_HEADS // world
        rows = slice(kv_head * HEAD_DIM, (kv_head + 1) * HEAD_DIM)
        return torch.cat([q.chunk(world, 0)[rank], k[rows], v[rows]], 0)

    def split_qkv(self, qkv):
        """The rank's q, k and v columns of its fused projection."""
        return qkv.split([self.q_local, self.kv_local, self.kv_local], dim=-1)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.split_qkv(self.qkv(self.enter_tp(x)))
        q = q.view(b, s, self.local_heads, HEAD_DIM).transpose(1, 2)
        k = k.view(b, s, self.local_kv_heads, HEAD_DIM).transpose(1, 2)
        v = v.view(b, s, self.local_kv_heads, HEAD_DIM).transpose(1, 2)
        n_rep = self.local_heads // self.local_kv_heads
        o = F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), is_causal=True)
        y = F.linear(o.transpose(1, 2).reshape(b, s, self.q_local), self.o_proj.weight)
        return self.reduce_tp(y) + self.o_proj.bias


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = GQAAttention()
    return Case(single=full, distributed=lambda rank, world: ParallelGQAAttention(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="gqa_attention", meta={"source": "GQA fused QKV"},
                expect={"out": "Replicate()"})
