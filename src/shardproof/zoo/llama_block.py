"""Llama-3 style decoder block, Megatron tensor parallel, with grouped-query attention.

RMSNorm and RoPE are written as decomposed ops (cos/sin are buffers built in ``__init__``);
GQA has 8 query heads and 2 KV heads (repeat_kv via expand + reshape); wq/wk/wv are
column-parallel, wo row-parallel + all_reduce; the SwiGLU MLP is w1/w3 column-parallel and
w2 row-parallel + all_reduce. No biases.

When the world size exceeds the number of KV heads, each KV head is replicated to a group of
ranks: rank r holds the query heads of its slice and KV head ``r * n_kv // world`` (the one its
query heads attend with), so wk/wv are related by Slices, not Shard.

    shardproof verify src/shardproof/zoo/llama_block.py --world-size 8
"""
import torch
from torch import nn
import torch.nn.functional as F

from shardproof import Case
from tensor_parallel import TensorParallel

HIDDEN, N_HEADS, N_KV_HEADS, FFN = 32, 8, 2, 64
HEAD_DIM = HIDDEN // N_HEADS
SEQ, BATCH, MAX_SEQ = 6, 2, 16
EPS, ROPE_THETA = 1e-5, 500000.0
WORLD_SIZES = (2, 4, 8)


def rms_norm(x, weight, eps=EPS):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_tables(head_dim=HEAD_DIM, max_seq=MAX_SEQ, theta=ROPE_THETA):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """x: (batch, heads, seq, head_dim); cos, sin: (seq, head_dim)."""
    return x * cos + rotate_half(x) * sin


def repeat_kv(x, n_rep):
    """(batch, kv_heads, seq, head_dim) -> (batch, kv_heads * n_rep, seq, head_dim)."""
    b, n_kv, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, n_kv, n_rep, s, d).reshape(b, n_kv * n_rep, s, d)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))
        nn.init.normal_(self.weight)

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class LlamaBlock(nn.Module):
    def __init__(self, hidden=HIDDEN, n_heads=N_HEADS, n_kv_heads=N_KV_HEADS, ffn=FFN):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, hidden // n_heads
        self.attention_norm = RMSNorm(hidden)
        self.wq = nn.Linear(hidden, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, hidden, bias=False)
        self.ffn_norm = RMSNorm(hidden)
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        cos, sin = rope_tables(self.head_dim)
        self.register_buffer("rope_cos", cos)
        self.register_buffer("rope_sin", sin)

    def rope(self, x):
        s = x.shape[-2]
        return apply_rope(x, self.rope_cos[:s], self.rope_sin[:s])

    def attention(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rope(q), self.rope(k)
        n_rep = self.n_heads // self.n_kv_heads
        o = F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, self.n_heads * self.head_dim))

    def mlp(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.mlp(self.ffn_norm(h))


class ParallelLlamaBlock(TensorParallel):
    """Rank r: query heads [r*Hq/W, (r+1)*Hq/W); KV heads [r*Hkv/W, (r+1)*Hkv/W) when W <= Hkv,
    else the single KV head r*Hkv//W (replicated across the W/Hkv ranks that share it)."""

    def __init__(self, full: LlamaBlock, rank: int, world: int):
        super().__init__()
        hidden, d = full.wq.in_features, full.head_dim
        ffn = full.w1.out_features
        self.head_dim = d
        self.local_heads = full.n_heads // world
        if world <= full.n_kv_heads:
            self.local_kv_heads = full.n_kv_heads // world
            kv_lo = rank * self.local_kv_heads
        else:
            self.local_kv_heads = 1
            kv_lo = rank * full.n_kv_heads // world
        kv_rows = slice(kv_lo * d, (kv_lo + self.local_kv_heads) * d)
        self.attention_norm = RMSNorm(hidden)
        self.wq = nn.Linear(hidden, self.local_heads * d, bias=False)
        self.wk = nn.Linear(hidden, self.local_kv_heads * d, bias=False)
        self.wv = nn.Linear(hidden, self.local_kv_heads * d, bias=False)
        self.wo = nn.Linear(self.local_heads * d, hidden, bias=False)
        self.ffn_norm = RMSNorm(hidden)
        self.w1 = nn.Linear(hidden, ffn // world, bias=False)
        self.w3 = nn.Linear(hidden, ffn // world, bias=False)
        self.w2 = nn.Linear(ffn // world, hidden, bias=False)
        cos, sin = rope_tables(d)
        self.register_buffer("rope_cos", cos)
        self.register_buffer("rope_sin", sin)
        with torch.no_grad():
            self.attention_norm.weight.copy_(full.attention_norm.weight)
            self.ffn_norm.weight.copy_(full.ffn_norm.weight)
            self.wq.weight.copy_(full.wq.weight.chunk(world, 0)[rank])
            self.wk.weight.copy_(full.wk.weight[kv_rows])
            self.wv.weight.copy_(full.wv.weight[kv_rows])
            self.wo.weight.copy_(full.wo.weight.chunk(world, 1)[rank])
            self.w1.weight.copy_(full.w1.weight.chunk(world, 0)[rank])
            self.w3.weight.copy_(full.w3.weight.chunk(world, 0)[rank])
            self.w2.weight.copy_(full.w2.weight.chunk(world, 1)[rank])

    def rope(self, x):
        s = x.shape[-2]
        return apply_rope(x, self.rope_cos[:s], self.rope_sin[:s])

    def enter_attention(self, x):
        """Where the fused q/k/v projections read the replicated input (Megatron's f)."""
        return self.enter_tp(x)

    def attention_scale(self):
        """The softmax scale of the attention scores (None: 1/sqrt(head_dim), as sdpa's default)."""
        return None

    def fan_out(self, h):
        """The residual stream read twice, by the residual add and by the norm (nnScaler's multiref)."""
        return h, h

    def qkv(self, x):
        """The rank's query, key and value heads, (batch, heads, seq, head_dim) each."""
        b, s, _ = x.shape
        x = self.enter_attention(x)
        q = self.wq(x).view(b, s, self.local_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.local_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.local_kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def attention(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x)
        q, k = self.rope(q), self.rope(k)
        n_rep = self.local_heads // self.local_kv_heads
        o = F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), is_causal=True,
                                           scale=self.attention_scale())
        return self.reduce_tp(self.wo(o.transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim)))

    def mlp(self, x):
        x = self.enter_tp(x)
        return self.reduce_tp(self.w2(F.silu(self.w1(x)) * self.w3(x)))

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        residual, h = self.fan_out(h)
        return residual + self.mlp(self.ffn_norm(h))


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = LlamaBlock()
    return Case(single=full, distributed=lambda rank, world: ParallelLlamaBlock(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="llama_block", meta={"source": "Llama block (TP, GQA)"},
                expect={"out": "Replicate()"})
