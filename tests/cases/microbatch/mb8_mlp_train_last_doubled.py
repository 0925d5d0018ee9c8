"""Bug: the last of 8 microbatches' loss is doubled (on every rank): only that microbatch's
program differs; the finding must name microbatch 7 (issue 16). The program is the 4-microbatch
symmetry case's (tests/cases/symmetry), run with 8."""
from mb8_mlp_train import case as mb8_case
from mb4_mlp_train_last_doubled import LastDoubled

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    return mb8_case(world_size, model=LastDoubled, name="mb8_mlp_train_last_doubled")
