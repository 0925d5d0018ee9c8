"""BUG: the received list concatenated in the wrong order."""
from collective_cases import make_case, all_to_all_expected, all_to_all_list_step

WORLD_SIZES = (3,)
LABEL = "bug"


def case(world_size=3):
    return make_case(world_size, all_to_all_list_step(swap=True),
                     all_to_all_expected,
                     "all_to_all_list_swapped_w3", group=[1, 2], block=2,
                     meta={"label": LABEL, "bug": "wrong-operand",
                           "bug_node": "cat_1", "bug_op": "aten.cat"})
