"""reduce_scatter of a list in group {1, 3}."""
from collective_cases import make_case, reduce_scatter_list_expected, reduce_scatter_list_step

WORLD_SIZES = (4,)
LABEL = "correct"


def case(world_size=4):
    return make_case(world_size, reduce_scatter_list_step(),
                     reduce_scatter_list_expected,
                     "reduce_scatter_list_w4", group=[1, 3], block=2,
                     meta={"label": LABEL})
