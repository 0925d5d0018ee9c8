"""Megatron-style tensor-parallel causal multi-head self-attention.

q/k/v projections are column-parallel (each rank holds the heads of its slice, with bias);
attention is written out with explicit ops (matmul, causal masked_fill, softmax); the output
projection is row-parallel, all-reduced, and its bias is added once after the reduction.

    shardproof verify src/shardproof/zoo/tp_attention.py --world-size 4
"""
import math

import torch
from torch import nn
import torch.nn.functional as F

from shardproof import Case
from tensor_parallel import TensorParallel

HIDDEN, HEADS, SEQ, BATCH = 48, 24, 6, 2
HEAD_DIM = HIDDEN // HEADS
WORLD_SIZES = (2, 3, 4, 6, 8)


def causal_attention(q, k, v, scale):
    """q, k, v: (batch, heads, seq, head_dim)."""
    seq = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=q.device), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v)


class Attention(nn.Module):
    def __init__(self, hidden=HIDDEN, heads=HEADS):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)
        self.scale = 1.0 / math.sqrt(self.head_dim)

    def _split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self._split(self.q_proj(x)), self._split(self.k_proj(x)), self._split(self.v_proj(x))
        o = causal_attention(q, k, v, self.scale)
        o = o.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        return self.out_proj(o)


class ParallelAttention(TensorParallel):
    """Rank r holds heads [r*H/W, (r+1)*H/W): rows of q/k/v (and their biases), columns of out_proj."""

    def __init__(self, full: Attention, rank: int, world: int):
        super().__init__()
        self.local_heads = full.heads // world
        self.head_dim = full.head_dim
        local = self.local_heads * self.head_dim
        hidden = full.heads * full.head_dim
        self.q_proj = nn.Linear(hidden, local)
        self.k_proj = nn.Linear(hidden, local)
        self.v_proj = nn.Linear(hidden, local)
        self.out_proj = nn.Linear(local, hidden)
        self.scale = 1.0 / math.sqrt(HEAD_DIM)  # global head_dim: the same on every rank
        with torch.no_grad():
            for name in ("q_proj", "k_proj", "v_proj"):
                src, dst = getattr(full, name), getattr(self, name)
                dst.weight.copy_(src.weight.chunk(world, 0)[rank])
                dst.bias.copy_(src.bias.chunk(world, 0)[rank])
            self.out_proj.weight.copy_(full.out_proj.weight.chunk(world, 1)[rank])
            self.out_proj.bias.copy_(full.out_proj.bias)

    def _split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.local_heads, self.head_dim).transpose(1, 2)

    def attend(self, x):
        b, s, _ = x.shape
        q, k, v = self._split(self.q_proj(x)), self._split(self.k_proj(x)), self._split(self.v_proj(x))
        o = causal_attention(q, k, v, self.scale)
        return o.transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim)

    def forward(self, x):
        y = self.reduce_tp(F.linear(self.attend(self.enter_tp(x)), self.out_proj.weight))
        return y + self.out_proj.bias


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Attention()
    return Case(single=full, distributed=lambda rank, world: ParallelAttention(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="tp_attention", meta={"source": "Megatron-LM TP attention"},
                expect={"out": "Replicate()"})
