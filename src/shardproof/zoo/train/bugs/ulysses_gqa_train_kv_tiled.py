"""Bug (Ulysses GQA training step, fewer KV heads than cp ranks: 2 KV heads at cp 4): the KV
heads are widened to the cp size by tiling (``t.repeat(1, cp // h, 1, 1)``: k0 k1 k0 k1)
instead of repeating each per group (k0 k0 k1 k1, DeepSpeed-Ulysses' ``repeat_interleave``), so
rank 1's query heads (2, 3 of group 0) meet KV head 1 and rank 2's (4, 5 of group 1) KV head 0.
Expected finding: the attention of ranks 1 and 2 in the first layer's forward. The correct
form: ``ulysses_gqa_train_widened.py``."""
import torch.distributed as dist

from mini_mesh import MeshUlyssesTraining, UlyssesLlamaBlock
from ulysses_gqa_train_widened import case as widened_case

WORLD_SIZES = (4,)
SWEEP = True  # a cp4 Llama step, about 20 s with its cross-check: tests/test_training.py runs it in the sweep


class TiledKVBlock(UlyssesLlamaBlock):
    def widen_kv(self, t):
        cp = dist.get_world_size(self.cp_group)
        return t if t.shape[1] % cp == 0 else t.repeat(1, cp // t.shape[1], 1, 1)  # BUG: tiled, not per group


class TiledKV(MeshUlyssesTraining):
    block = TiledKVBlock


def case(world_size: int = 4):
    return widened_case(world_size, model=TiledKV, name="ulysses_gqa_train_kv_tiled",
                        meta={"source": "KV heads tiled instead of repeated per group before the Ulysses split "
                                        "(training step)",
                              "bug": "wrong-shard-offset", "bug_node": "_scaled_dot_product_flash_attention_for_cpu",
                              "bug_op": "aten._scaled_dot_product_flash_attention_for_cpu", "bug_ranks": [1, 2],
                              "bug_source": "mini_mesh.py:117", "bug_line": "F.scaled_dot_product_attention",
                              "hint": "same piece as on rank"})
