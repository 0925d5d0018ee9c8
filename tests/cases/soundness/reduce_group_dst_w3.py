"""reduce to group rank 1 (global 2), then broadcast from global 2."""
from collective_cases import make_case, reduce_step, sum_of_members

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, reduce_step(group_dst=1, send_from=2),
                     sum_of_members,
                     "reduce_group_dst_w3", group=[1, 2], block=2,
                     meta={"label": LABEL})
