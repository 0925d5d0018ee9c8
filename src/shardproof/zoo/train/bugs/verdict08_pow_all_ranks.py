"""Bug (VERDICT repro 8 on every rank, "multi-rank constant mutant in pow"): the shared
tensor-parallel module computes the attention RMSNorm's mean square with ``x.pow(1)`` on
every rank; the ranks agree with each other, so a check comparing ranks misses it. Expected:
the first finding at that pow, on every rank."""
from verdict08_pow_one_rank import PowMutant, case as pow_case

WORLD_SIZES = (4,)


class AllRanksPowMutant(PowMutant):
    MUTATED_RANKS = {0, 1, 2, 3}


def case(world_size: int = 4):
    return pow_case(world_size, model=AllRanksPowMutant, name="verdict08_pow_all_ranks",
                    source="VERDICT repro 8 (all ranks): multi-rank constant mutant in pow", ranks=range(world_size),
                    kind="value-mismatch")
