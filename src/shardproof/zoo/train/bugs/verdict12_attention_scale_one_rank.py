"""Bug (VERDICT repro 12, "inconsistent scaling of tensors", one rank): rank 0 scales its
attention scores by 1/4 (VERDICT's mutated divisor) where the single-device model and the
other ranks use 1/sqrt(head_dim); only the heads rank 0 owns are scaled wrongly. The variant
on every rank is verdict13_attention_scale_all_ranks. Expected: the first finding at the
attention, on rank 0 only."""
from llama_block_train import TrainParallelLlamaBlock, case as llama_case

WORLD_SIZES = (4,)


class OneRankScale(TrainParallelLlamaBlock):
    def attention_scale(self):
        return 0.25 if self.mesh.rank == 0 else super().attention_scale()  # BUG: divisor 4 on rank 0


def case(world_size: int = 4):
    return llama_case(world_size, dp=2, model=OneRankScale, name="verdict12_attention_scale_one_rank",
                      meta={"source": "VERDICT repro 12: inconsistent attention scaling on one TP rank",
                            "bug_op": "aten._scaled_dot_product_flash_attention_for_cpu",
                            "bug_ranks": [0], "bug": "rank-specific-mismatch",
                            "hint": r"scale = 0\.25", "bug_line": "F.scaled_dot_product_attention",
                            "bug_node": "_scaled_dot_product_flash_attention_for_cpu", "bug_source": "llama_block.py"})
