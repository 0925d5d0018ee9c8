"""BUG: the input list in the wrong order."""
from collective_cases import make_case, reduce_scatter_list_expected, reduce_scatter_list_step

WORLD_SIZES = (4,)
LABEL = "bug"


def case(world_size=4):
    return make_case(world_size, reduce_scatter_list_step(swap=True),
                     reduce_scatter_list_expected,
                     "reduce_scatter_list_swapped_w4", group=[1, 3], block=2,
                     meta={"label": LABEL, "bug": "rank-specific-mismatch",
                           "bug_node": "mul_1", "bug_op": "aten.mul"})
