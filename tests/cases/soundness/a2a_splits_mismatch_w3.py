"""BUG: rank 1's output splits do not match what its peers send it."""
from collective_cases import make_case, a2a_splits_expected, a2a_splits_step

WORLD_SIZES = (3,)
LABEL = "bug"
SEND = [[1, 2, 0], [0, 1, 2], [2, 0, 1]]


def reversed_on_rank_1(k, outs):
    """Rank 1 lists its receive sizes in reverse peer order."""
    return outs[::-1] if k == 1 else outs


def case(world_size=3):
    return make_case(world_size, a2a_splits_step(SEND, receive_fix=reversed_on_rank_1),
                     a2a_splits_expected(SEND),
                     "a2a_splits_mismatch_w3", group=None, block=3,
                     meta={"label": LABEL, "bug": "collective-mismatch",
                           "bug_node": "all_to_all_single", "bug_op": "_c10d_functional.all_to_all_single"})
