"""scatter from global rank 3 in group {1, 3}."""
from collective_cases import make_case, scatter_expected, scatter_step

WORLD_SIZES = (4,)
LABEL = "correct"


def case(world_size=4):
    return make_case(world_size, scatter_step(root=3),
                     scatter_expected(3),
                     "scatter_src_global_w4", group=[1, 3], block=2,
                     meta={"label": LABEL})
