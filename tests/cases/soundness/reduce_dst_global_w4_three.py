"""reduce to global rank 3 in group {0, 2, 3}, then broadcast from it."""
from collective_cases import make_case, reduce_step, sum_of_members

WORLD_SIZES = (4,)
LABEL = "correct"


def case(world_size=4):
    return make_case(world_size, reduce_step(dst=3, send_from=3),
                     sum_of_members,
                     "reduce_dst_global_w4_three", group=[0, 2, 3], block=2,
                     meta={"label": LABEL})
