"""BUG: the gathered list read in the wrong order."""
from collective_cases import make_case, all_gather_list_expected, all_gather_list_step

WORLD_SIZES = (3,)
LABEL = "bug"


def case(world_size=3):
    return make_case(world_size, all_gather_list_step(swap=True),
                     all_gather_list_expected,
                     "all_gather_list_swapped_w3", group=[1, 2], block=2,
                     meta={"label": LABEL, "bug": "rank-specific-mismatch",
                           "bug_node": "sub", "bug_op": "aten.sub"})
