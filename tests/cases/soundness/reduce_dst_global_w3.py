"""reduce to global rank 2 in group {1, 2}, then broadcast from it."""
from collective_cases import make_case, reduce_step, sum_of_members

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, reduce_step(dst=2, send_from=2),
                     sum_of_members,
                     "reduce_dst_global_w3", group=[1, 2], block=2,
                     meta={"label": LABEL})
