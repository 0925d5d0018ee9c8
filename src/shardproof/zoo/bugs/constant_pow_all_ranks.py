"""Bug (VERDICT, "multi-rank constant mutant in pow"): every rank's RMSNorm squares with exponent
2.5 instead of 2 (a mistyped constant in the shared TP module), so ``x.pow(2)`` differs from the
single-device program on all ranks at once -- no rank disagrees with another, so a check that
only compares ranks misses it. Expected finding: the pow inside the attention RMSNorm, on every
rank."""
import torch

from shardproof import Case
from llama_block import BATCH, HIDDEN, SEQ, LlamaBlock, ParallelLlamaBlock

WORLD_SIZES = (2, 4)


class PowMutant(ParallelLlamaBlock):
    MUTATED_RANKS = None  # None: every rank

    def __init__(self, full, rank, world):
        super().__init__(full, rank, world)
        if self.MUTATED_RANKS is not None and rank not in self.MUTATED_RANKS:
            return
        for norm in (self.attention_norm, self.ffn_norm):
            norm.forward = lambda x, norm=norm: x * torch.rsqrt(
                x.pow(2.5).mean(-1, keepdim=True) + norm.eps) * norm.weight  # BUG: exponent 2.5, not 2


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = LlamaBlock()
    return Case(single=full, distributed=lambda rank, world: PowMutant(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="constant_pow_all_ranks",
                meta={"source": "VERDICT: constant mutant in pow (all ranks)",
                      "bug_op": "aten.pow", "bug_node": "pow_1", "bug_ranks": "all", "bug": "value-mismatch",
                      "hint": r"2\.5"})
