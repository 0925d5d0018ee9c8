"""all_to_all_single with per-rank split sizes (MoE routing)."""
from collective_cases import make_case, a2a_splits_expected, a2a_splits_step

WORLD_SIZES = (3,)
LABEL = "correct"
SEND = [[1, 2, 0], [0, 1, 2], [2, 0, 1]]


def case(world_size=3):
    return make_case(world_size, a2a_splits_step(SEND),
                     a2a_splits_expected(SEND),
                     "a2a_splits_w3", group=None, block=3,
                     meta={"label": LABEL})
