"""BUG: dst=2 (global) where group rank 2 (global 3) was meant; global 3's buffer is then backend-defined."""
from collective_cases import make_case, reduce_step, sum_of_members

WORLD_SIZES = (4,)
LABEL = "bug"


def case(world_size=4):
    return make_case(world_size, reduce_step(dst=2, send_from=3),
                     sum_of_members,
                     "reduce_group_rank_as_dst_w4_three", group=[0, 2, 3], block=2,
                     meta={"label": LABEL, "bug": "wrong-collective",
                           "bug_node": "reduce", "bug_op": "shardproof_c10d.reduce"})
