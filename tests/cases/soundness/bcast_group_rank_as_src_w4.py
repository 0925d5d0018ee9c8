"""BUG: src=1 (global) where group rank 1 (global 3) was meant."""
from collective_cases import make_case, broadcast_expected, broadcast_step

WORLD_SIZES = (4,)
LABEL = "bug"


def case(world_size=4):
    return make_case(world_size, broadcast_step(root=1),
                     broadcast_expected(3),
                     "bcast_group_rank_as_src_w4", group=[1, 3], block=2,
                     meta={"label": LABEL, "bug": "wrong-shard-offset",
                           "bug_node": "add", "bug_op": "aten.add"})
