"""Bug (VERDICT repro 7, "single-rank constant mutant in add"): on rank 0 only, the attention
RMSNorm adds eps = 2.0 instead of 1e-5 to the mean square (VERDICT's mutation of the add's
constant; in practice a per-rank config read). The multi-rank variant is
verdict09_eps_add_two_ranks. Expected: the first finding at that ``mean + eps`` add, on rank
0 only."""
from llama_block_train import TrainParallelLlamaBlock, case as llama_case

WORLD_SIZES = (4,)


class EpsMutant(TrainParallelLlamaBlock):
    MUTATED_RANKS = {0}

    def __init__(self, full, rank, world, tp):
        super().__init__(full, rank, world, tp)
        if rank in self.MUTATED_RANKS:
            self.attention_norm.eps = 2.0  # BUG: the single-device model (and the other ranks) use 1e-5


def case(world_size: int = 4, model=EpsMutant, name="verdict07_eps_add_one_rank",
         source="VERDICT repro 7: single-rank constant mutant in add", ranks=(0,), kind="rank-specific-mismatch"):
    return llama_case(world_size, dp=2, model=model, name=name,
                      meta={"source": source, "bug_op": "aten.add", "bug_ranks": list(ranks), "bug": kind,
                            "hint": r"constant arguments.*1e-05", "bug_line": "+ eps",
                            "bug_node": "add", "bug_source": "llama_block.py"})
