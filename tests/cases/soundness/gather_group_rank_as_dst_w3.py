"""BUG: gathers to global rank 1 but broadcasts global rank 2's (zero) sum."""
from collective_cases import make_case, gather_step, sum_of_members

WORLD_SIZES = (3,)
LABEL = "bug"


def case(world_size=3):
    return make_case(world_size, gather_step(dst=1, send_from=2),
                     sum_of_members,
                     "gather_group_rank_as_dst_w3", group=[1, 2], block=2,
                     meta={"label": LABEL, "bug": "wrong-collective",
                           "bug_node": "gather", "bug_op": "shardproof_c10d.gather"})
