"""Pre-LN GPT-2 transformer block, Megatron tensor parallel.

The fused ``c_attn`` projection Linear(h, 3h) is column-parallel *per head group*: rank r holds
rows [q_r | k_r | v_r] of the fused weight (an Interleaved layout, not a plain Shard(0)).
Attention uses ``scaled_dot_product_attention(is_causal=True)``; ``c_proj`` is row-parallel and
all-reduced with its bias added once; the MLP (GELU, tanh approximation) is column -> row
parallel with an all_reduce. LayerNorms and residuals are replicated.

    shardproof verify src/shardproof/zoo/gpt2_block.py --world-size 4
"""
import torch
from torch import nn
import torch.nn.functional as F

from shardproof import Case
from tensor_parallel import TensorParallel

HIDDEN, HEADS, SEQ, BATCH = 48, 24, 6, 2
HEAD_DIM = HIDDEN // HEADS
FFN = 4 * HIDDEN
EPS = 1e-5
WORLD_SIZES = (2, 3, 4, 6, 8)


class GPT2Block(nn.Module):
    def __init__(self, hidden=HIDDEN, heads=HEADS, ffn=FFN):
        super().__init__()
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.ln_1 = nn.LayerNorm(hidden, eps=EPS)
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden, eps=EPS)
        self.c_fc = nn.Linear(hidden, ffn)
        self.mlp_proj = nn.Linear(ffn, hidden)
        for ln in (self.ln_1, self.ln_2):
            nn.init.normal_(ln.weight)
            nn.init.normal_(ln.bias)

    def _heads(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def attn(self, x):
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).split(self.hidden, dim=-1)
        o = F.scaled_dot_product_attention(self._heads(q), self._heads(k), self._heads(v), is_causal=True)
        return self.c_proj(o.transpose(1, 2).reshape(b, s, self.hidden))

    def mlp(self, x):
        return self.mlp_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ParallelGPT2Block(TensorParallel):
    """Rank r holds heads [r*H/W, (r+1)*H/W) and the r-th slice of the MLP's hidden units."""

    def __init__(self, full: GPT2Block, rank: int, world: int):
        super().__init__()
        hidden, ffn = full.hidden, full.c_fc.out_features
        self.local_heads, self.head_dim = full.heads // world, full.head_dim
        self.local = self.local_heads * self.head_dim
        self.ln_1 = nn.LayerNorm(hidden, eps=EPS)
        self.c_attn = nn.Linear(hidden, 3 * self.local)
        self.c_proj = nn.Linear(self.local, hidden)
        self.ln_2 = nn.LayerNorm(hidden, eps=EPS)
        self.c_fc = nn.Linear(hidden, ffn // world)
        self.mlp_proj = nn.Linear(ffn // world, hidden)
        with torch.no_grad():
            for name in ("ln_1", "ln_2"):
                getattr(self, name).load_state_dict(getattr(full, name).state_dict())
            # fused QKV: take this rank's heads from each of q, k, v and re-fuse them
            w_q, w_k, w_v = full.c_attn.weight.split(hidden, dim=0)
            b_q, b_k, b_v = full.c_attn.bias.split(hidden, dim=0)
            self.c_attn.weight.copy_(torch.cat([w.chunk(world, 0)[rank] for w in (w_q, w_k, w_v)], 0))
            self.c_attn.bias.copy_(torch.cat([b.chunk(world, 0)[rank] for b in (b_q, b_k, b_v)], 0))
            self.c_proj.weight.copy_(full.c_proj.weight.chunk(world, 1)[rank])
            self.c_proj.bias.copy_(full.c_proj.bias)
            self.c_fc.weight.copy_(full.c_fc.weight.chunk(world, 0)[rank])
            self.c_fc.bias.copy_(full.c_fc.bias.chunk(world, 0)[rank])
            self.mlp_proj.weight.copy_(full.mlp_proj.weight.chunk(world, 1)[rank])
            self.mlp_proj.bias.copy_(full.mlp_proj.bias)

    def _heads(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.local_heads, self.head_dim).transpose(1, 2)

    def attn(self, x):
        b, s, _ = x.shape
        q, k, v = self.c_attn(self.enter_tp(x)).split(self.local, dim=-1)
        o = F.scaled_dot_product_attention(self._heads(q), self._heads(k), self._heads(v), is_causal=True)
        y = self.reduce_tp(F.linear(o.transpose(1, 2).reshape(b, s, self.local), self.c_proj.weight))
        return y + self.c_proj.bias

    def mlp(self, x):
        y = F.linear(F.gelu(self.c_fc(self.enter_tp(x)), approximate="tanh"), self.mlp_proj.weight)
        return self.reduce_tp(y) + self.mlp_proj.bias

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = GPT2Block()
    return Case(single=full, distributed=lambda rank, world: ParallelGPT2Block(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="gpt2_block", meta={"source": "Megatron GPT-2 block"},
                expect={"out": "Replicate()"})
