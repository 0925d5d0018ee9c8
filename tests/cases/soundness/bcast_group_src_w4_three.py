"""broadcast in group {0, 2, 3} from group rank 2 (global 3)."""
from collective_cases import make_case, broadcast_expected, broadcast_step

WORLD_SIZES = (4,)
LABEL = "correct"


def case(world_size=4):
    return make_case(world_size, broadcast_step(group_root=2),
                     broadcast_expected(3),
                     "bcast_group_src_w4_three", group=[0, 2, 3], block=2,
                     meta={"label": LABEL})
