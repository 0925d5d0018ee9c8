"""BUG: dst=1 names global rank 1, so global rank 2's buffer (broadcast after) is backend-defined."""
from collective_cases import make_case, reduce_step, sum_of_members

WORLD_SIZES = (3,)
LABEL = "bug"


def case(world_size=3):
    return make_case(world_size, reduce_step(dst=1, send_from=2),
                     sum_of_members,
                     "reduce_group_rank_as_dst_w3", group=[1, 2], block=2,
                     meta={"label": LABEL, "bug": "wrong-collective",
                           "bug_node": "reduce", "bug_op": "shardproof_c10d.reduce"})
