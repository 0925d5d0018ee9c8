"""gather to group rank 1 (global 2), sum there, broadcast."""
from collective_cases import make_case, gather_step, sum_of_members

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, gather_step(group_dst=1, send_from=2),
                     sum_of_members,
                     "gather_group_dst_w3", group=[1, 2], block=2,
                     meta={"label": LABEL})
