"""gather to global rank 2 in group {1, 2}, sum there, broadcast."""
from collective_cases import make_case, gather_step, sum_of_members

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, gather_step(dst=2, send_from=2),
                     sum_of_members,
                     "gather_dst_global_w3", group=[1, 2], block=2,
                     meta={"label": LABEL})
