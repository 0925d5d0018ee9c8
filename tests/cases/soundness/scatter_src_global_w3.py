"""scatter from global rank 2 in group {1, 2}."""
from collective_cases import make_case, scatter_expected, scatter_step

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, scatter_step(root=2),
                     scatter_expected(2),
                     "scatter_src_global_w3", group=[1, 2], block=2,
                     meta={"label": LABEL})
