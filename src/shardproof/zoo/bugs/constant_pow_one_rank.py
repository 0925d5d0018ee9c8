"""Bug (VERDICT, "single-rank constant mutant in pow"): only rank 1's RMSNorm squares with
exponent 2.5 instead of 2 (the all-ranks variant is bugs/constant_pow_all_ranks). Expected
finding: the pow inside the attention RMSNorm, on rank 1 only."""
import torch

from shardproof import Case
from constant_pow_all_ranks import PowMutant
from llama_block import BATCH, HIDDEN, SEQ, LlamaBlock

WORLD_SIZES = (2, 4)


class OneRankPowMutant(PowMutant):
    MUTATED_RANKS = {1}


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = LlamaBlock()
    return Case(single=full, distributed=lambda rank, world: OneRankPowMutant(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="constant_pow_one_rank",
                meta={"source": "VERDICT: constant mutant in pow (one rank)",
                      "bug_op": "aten.pow", "bug_node": "pow_1", "bug_ranks": [1], "bug": "rank-specific-mismatch",
                      "hint": r"2\.5"})
