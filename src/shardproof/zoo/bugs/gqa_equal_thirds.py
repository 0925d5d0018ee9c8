"""Bug: when sharding the fused QKV weight of a GQA model (q section 48 rows, k and v 12 rows
each), the conversion splits the fused tensor into three *equal* thirds with ``.chunk(3)``
(an MHA assumption) instead of ``.split([q, kv, kv])``, then shards each third. Shapes still
line up (every rank gets T/W rows and splits them into [q_local, kv_local, kv_local]), but each
rank's "q" holds the wrong query heads, its "k" holds query/key rows and its "v" key/value rows.
Expected finding: the attention (SDPA) output, on every rank — the first tensor that pairs
query heads with key/value heads the single-device program never pairs."""
import torch

from shardproof import Case
from gqa_attention import BATCH, HIDDEN, SEQ, GQAAttention, ParallelGQAAttention

WORLD_SIZES = (2, 4)


class EqualThirds(ParallelGQAAttention):
    def sections(self, fused):
        return fused.chunk(3, dim=0)  # BUG: q, k, v sections have sizes [48, 12, 12], not thirds


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = GQAAttention()
    return Case(single=full, distributed=lambda rank, world: EqualThirds(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="gqa_equal_thirds",
                meta={"source": "Aerify: GQA equal thirds",
                      "bug_op": "aten._scaled_dot_product_flash_attention_for_cpu",
                      "bug_node": "_scaled_dot_product_flash_attention_for_cpu", "bug_ranks": "all",
                      "bug": "wrong-shard-offset",
                      "hint": r"shard", "bug_line": "scaled_dot_product_attention"})
