"""broadcast in group {1, 3} from global rank 3."""
from collective_cases import make_case, broadcast_expected, broadcast_step

WORLD_SIZES = (4,)
LABEL = "correct"


def case(world_size=4):
    return make_case(world_size, broadcast_step(root=3),
                     broadcast_expected(3),
                     "bcast_src_global_w4", group=[1, 3], block=2,
                     meta={"label": LABEL})
