"""all_to_all_single in group {1, 3}, contiguous buffers."""
from collective_cases import make_case, a2a_single_step, all_to_all_expected

WORLD_SIZES = (4,)
LABEL = "correct"


def case(world_size=4):
    return make_case(world_size, a2a_single_step(),
                     all_to_all_expected,
                     "a2a_contiguous_out_w4", group=[1, 3], block=2,
                     meta={"label": LABEL})
