"""Bug (VERDICT repro 8, "single-rank constant mutant in pow"): on rank 0 only, the attention
RMSNorm computes its mean square with ``x.pow(1)`` instead of ``x.pow(2)`` (VERDICT's mutation).
The all-ranks variant is verdict08_pow_all_ranks. Expected: the first finding at that pow, on
rank 0 only."""
import torch

from llama_block import RMSNorm
from llama_block_train import TrainParallelLlamaBlock, case as llama_case

WORLD_SIZES = (4,)


class Pow1RMSNorm(RMSNorm):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(1).mean(-1, keepdim=True) + self.eps) * self.weight  # BUG: pow(x, 1)


class PowMutant(TrainParallelLlamaBlock):
    MUTATED_RANKS = {0}

    def __init__(self, full, rank, world, tp):
        super().__init__(full, rank, world, tp)
        if rank in self.MUTATED_RANKS:
            self.attention_norm.__class__ = Pow1RMSNorm


def case(world_size: int = 4, model=PowMutant, name="verdict08_pow_one_rank",
         source="VERDICT repro 8: single-rank constant mutant in pow", ranks=(0,), kind="rank-specific-mismatch"):
    return llama_case(world_size, dp=2, model=model, name=name,
                      meta={"source": source, "bug_op": "aten.pow", "bug_ranks": list(ranks), "bug": kind,
                            "hint": r"constant arguments.*has 2", "bug_line": "x.pow(1)",
                            "bug_node": "pow_1", "bug_source": "verdict08_pow_one_rank.py"})
