"""Bug (vLLM issue 1735): with more tensor-parallel ranks than KV heads, each KV head must be
replicated to the tp/Hkv ranks that share it (rank r loads KV head r * Hkv // tp); the loader
indexed the KV shard by ``rank % Hkv`` instead, so with tp 4 and 2 KV heads ranks 1 and 2 load
the other KV head and attend their queries with the wrong keys and values. Expected finding:
the attention (SDPA) on ranks 1 and 2 only."""
import torch

from shardproof import Case
from llama_block import BATCH, HIDDEN, SEQ, LlamaBlock, ParallelLlamaBlock

WORLD_SIZES = (4,)


class WrongKVShard(ParallelLlamaBlock):
    def __init__(self, full, rank, world):
        super().__init__(full, rank, world)
        kv_head = rank % full.n_kv_heads  # BUG: should be rank * full.n_kv_heads // world
        rows = slice(kv_head * full.head_dim, (kv_head + 1) * full.head_dim)
        with torch.no_grad():
            self.wk.weight.copy_(full.wk.weight[rows])
            self.wv.weight.copy_(full.wv.weight[rows])


def case(world_size: int = 4) -> Case:
    torch.manual_seed(0)
    full = LlamaBlock()
    return Case(single=full, distributed=lambda rank, world: WrongKVShard(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="vllm_1735_gqa_kv_shard",
                meta={"source": "vLLM issue 1735 (GQA, tp > KV heads, wrong KV shard)",
                      "bug_op": "aten._scaled_dot_product_flash_attention_for_cpu",
                      "bug_node": "_scaled_dot_product_flash_attention_for_cpu", "bug_ranks": [1, 2],
                      "bug": "wrong-shard-offset",
                      "hint": r"shard", "bug_line": "scaled_dot_product_attention"})
