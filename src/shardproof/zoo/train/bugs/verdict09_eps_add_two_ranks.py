"""Bug (VERDICT repro 9, "multi-rank constant mutant in add"): both tensor-parallel ranks of
data-parallel replica 0 (ranks 0 and 1) use the wrong eps in the attention RMSNorm; they agree
with each other, and with no collective between them and replica 1 in the forward, only a
comparison with the single-device program shows it. Expected: the first finding at the
``mean + eps`` add, on ranks 0 and 1."""
from verdict07_eps_add_one_rank import EpsMutant, case as eps_case

WORLD_SIZES = (4,)


class TwoRankEpsMutant(EpsMutant):
    MUTATED_RANKS = {0, 1}


def case(world_size: int = 4):
    return eps_case(world_size, model=TwoRankEpsMutant, name="verdict09_eps_add_two_ranks",
                    source="VERDICT repro 9: multi-rank constant mutant in add", ranks=(0, 1))
