"""Bug (Aerify, "key slice starting at 0"): the local fused QKV output is split by hand-written
slices and the key slice starts at offset 0 instead of after the query section, so the "keys"
are the first query heads' projections. Shapes still line up. Expected finding: the attention
(SDPA) that pairs queries with these keys, on every rank."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case
from gqa_attention import BATCH, HEAD_DIM, HIDDEN, SEQ, GQAAttention, ParallelGQAAttention, repeat_kv

WORLD_SIZES = (2, 4)


class KeySliceAtZero(ParallelGQAAttention):
    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x)
        q = qkv[..., :self.q_local]
        k = qkv[..., 0:self.kv_local]  # BUG: should start at self.q_local
        v = qkv[..., self.q_local + self.kv_local:]
        q = q.reshape(b, s, self.local_heads, HEAD_DIM).transpose(1, 2)
        k = k.reshape(b, s, self.local_kv_heads, HEAD_DIM).transpose(1, 2)
        v = v.reshape(b, s, self.local_kv_heads, HEAD_DIM).transpose(1, 2)
        n_rep = self.local_heads // self.local_kv_heads
        o = F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), is_causal=True)
        y = F.linear(o.transpose(1, 2).reshape(b, s, self.q_local), self.o_proj.weight)
        dist.all_reduce(y)
        return y + self.o_proj.bias


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = GQAAttention()
    return Case(single=full, distributed=lambda rank, world: KeySliceAtZero(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="key_slice_at_zero",
                meta={"source": "Aerify: key slice starting at 0",
                      "bug_op": "aten._scaled_dot_product_flash_attention_for_cpu",
                      "bug_node": "_scaled_dot_product_flash_attention_for_cpu", "bug_ranks": "all",
                      "bug": "wrong-shard-offset"})
