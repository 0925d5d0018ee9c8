"""scatter from group rank 1 (global 2) in group {1, 2}."""
from collective_cases import make_case, scatter_expected, scatter_step

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, scatter_step(group_root=1),
                     scatter_expected(2),
                     "scatter_group_src_w3", group=[1, 2], block=2,
                     meta={"label": LABEL})
