"""Bug (Aerify, "key slice starting at 0"): the local fused QKV output is split by a
hand-written slice for the keys that starts at offset 0 instead of after the query section, so the "keys"
are the first query heads' projections. Shapes still line up. Expected finding: the attention
(SDPA) that pairs queries with these keys, on every rank."""
import torch

from shardproof import Case
from gqa_attention import BATCH, HIDDEN, SEQ, GQAAttention, ParallelGQAAttention

WORLD_SIZES = (2, 4)


class KeySliceAtZero(ParallelGQAAttention):
    def split_qkv(self, qkv):
        q, _, v = super().split_qkv(qkv)
        return q, qkv[..., 0:self.kv_local], v  # BUG: k starts at self.q_local, not 0 (this reads q)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = GQAAttention()
    return Case(single=full, distributed=lambda rank, world: KeySliceAtZero(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="key_slice_at_zero",
                meta={"source": "Aerify: key slice starting at 0",
                      "bug_op": "aten._scaled_dot_product_flash_attention_for_cpu",
                      "bug_node": "_scaled_dot_product_flash_attention_for_cpu", "bug_ranks": "all",
                      "bug": "wrong-shard-offset",
                      "hint": r"shard", "bug_line": "scaled_dot_product_attention"})
