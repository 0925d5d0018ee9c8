"""BUG: global rank 3 expects one row more from global 0 than it sends."""
from collective_cases import make_case, a2a_splits_expected, a2a_splits_step

WORLD_SIZES = (4,)
LABEL = "bug"
SEND = [[2, 0, 0], [1, 0, 1], [0, 1, 1]]


def one_more_from_rank_0(k, outs):
    """Group rank 2 (global 3) expects one more row from global 0 and one fewer from global 3."""
    return [outs[0] + 1, outs[1], outs[2] - 1] if k == 2 else outs


def case(world_size=4):
    return make_case(world_size, a2a_splits_step(SEND, receive_fix=one_more_from_rank_0),
                     a2a_splits_expected(SEND),
                     "a2a_splits_mismatch_w4_three", group=[0, 2, 3], block=2,
                     meta={"label": LABEL, "bug": "collective-mismatch",
                           "bug_node": "all_to_all_single", "bug_op": "_c10d_functional.all_to_all_single"})
