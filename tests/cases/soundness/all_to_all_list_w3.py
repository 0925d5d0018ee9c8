"""all_to_all of lists in group {1, 2}."""
from collective_cases import make_case, all_to_all_expected, all_to_all_list_step

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, all_to_all_list_step(),
                     all_to_all_expected,
                     "all_to_all_list_w3", group=[1, 2], block=2,
                     meta={"label": LABEL})
