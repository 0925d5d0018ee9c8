"""per-rank split sizes in group {0, 2, 3}."""
from collective_cases import make_case, a2a_splits_expected, a2a_splits_step

WORLD_SIZES = (4,)
LABEL = "correct"
SEND = [[2, 0, 0], [1, 0, 1], [0, 1, 1]]


def case(world_size=4):
    return make_case(world_size, a2a_splits_step(SEND),
                     a2a_splits_expected(SEND),
                     "a2a_splits_w4_three", group=[0, 2, 3], block=2,
                     meta={"label": LABEL})
