"""broadcast in group {1, 2} from group rank 1 (group_src), i.e. global rank 2."""
from collective_cases import make_case, broadcast_expected, broadcast_step

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, broadcast_step(group_root=1),
                     broadcast_expected(2),
                     "bcast_group_src_w3", group=[1, 2], block=2,
                     meta={"label": LABEL})
