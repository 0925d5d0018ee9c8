"""broadcast in group {1, 2} from global rank 2 (src is a global rank)."""
from collective_cases import make_case, broadcast_expected, broadcast_step

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, broadcast_step(root=2),
                     broadcast_expected(2),
                     "bcast_src_global_w3", group=[1, 2], block=2,
                     meta={"label": LABEL})
