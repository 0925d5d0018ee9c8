"""Bug (Ulysses GQA training step, fewer KV heads than cp ranks: 2 KV heads at cp 4): the
widened KV replicas are put in the all_to_all's send order shifted by one (replica r + 1 to
rank r), so ranks 1 and 3 receive the replica meant for their neighbour, of the other group's
KV head (ranks 0 and 2 happen to get a replica of their own head). Expected finding: the
attention of ranks 1 and 3 in the first layer's forward. The correct form:
``ulysses_gqa_train_widened.py``."""
import torch

from mini_mesh import MeshUlyssesTraining, UlyssesLlamaBlock
from ulysses_gqa_train_widened import case as widened_case

WORLD_SIZES = (4,)
SWEEP = True  # a cp4 Llama step, about 20 s with its cross-check: tests/test_training.py runs it in the sweep


class ShiftedKVBlock(UlyssesLlamaBlock):
    def widen_kv(self, t):
        w = super().widen_kv(t)
        return torch.cat([w[:, 1:], w[:, :1]], dim=1)  # BUG: replica r + 1 sent to rank r


class ShiftedKV(MeshUlyssesTraining):
    block = ShiftedKVBlock


def case(world_size: int = 4):
    return widened_case(world_size, model=ShiftedKV, name="ulysses_gqa_train_kv_wrong_rank",
                        meta={"source": "Ulysses KV replica of the neighbouring rank (send order off by one)",
                              "bug": "wrong-shard-offset", "bug_node": "_scaled_dot_product_flash_attention_for_cpu",
                              "bug_op": "aten._scaled_dot_product_flash_attention_for_cpu", "bug_ranks": [1, 3],
                              "bug_source": "mini_mesh.py:117", "bug_line": "F.scaled_dot_product_attention",
                              "hint": "same piece as on rank"})
