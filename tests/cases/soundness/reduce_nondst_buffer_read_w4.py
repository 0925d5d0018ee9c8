"""BUG: after reduce to global rank 3 in group {1, 3}, global rank 1 reads its own buffer as if
it held the sum (c10d leaves it backend-defined: gloo leaves partial sums there)."""
from collective_cases import make_case, reduce_step, sum_of_members

WORLD_SIZES = (4,)
LABEL = "bug"


def case(world_size=4):
    return make_case(world_size, reduce_step(dst=3),
                     sum_of_members,
                     "reduce_nondst_buffer_read_w4", group=[1, 3], block=2,
                     meta={"label": LABEL, "bug": "wrong-collective",
                           "bug_node": "reduce", "bug_op": "shardproof_c10d.reduce"})
