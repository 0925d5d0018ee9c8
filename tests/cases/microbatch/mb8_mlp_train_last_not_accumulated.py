"""Bug: the last of 8 microbatches' gradients replace the accumulated ones instead of adding
to them (a missing accumulation in that microbatch only; issue 16). The program is the
4-microbatch symmetry case's (tests/cases/symmetry), run with 8."""
from mb8_mlp_train import case as mb8_case
from mb4_mlp_train_last_not_accumulated import LastNotAccumulated

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    return mb8_case(world_size, model=LastNotAccumulated, name="mb8_mlp_train_last_not_accumulated")
