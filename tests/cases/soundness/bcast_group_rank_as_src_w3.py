"""BUG: the owner is group rank 1 (global 2) but src=1 names global rank 1."""
from collective_cases import make_case, broadcast_expected, broadcast_step

WORLD_SIZES = (3,)
LABEL = "bug"


def case(world_size=3):
    return make_case(world_size, broadcast_step(root=1),
                     broadcast_expected(2),
                     "bcast_group_rank_as_src_w3", group=[1, 2], block=2,
                     meta={"label": LABEL, "bug": "wrong-shard-offset",
                           "bug_node": "add", "bug_op": "aten.add"})
