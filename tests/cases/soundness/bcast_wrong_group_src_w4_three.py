"""BUG: group_src=1 is global rank 2, the owner is global 3."""
from collective_cases import make_case, broadcast_expected, broadcast_step

WORLD_SIZES = (4,)
LABEL = "bug"


def case(world_size=4):
    return make_case(world_size, broadcast_step(group_root=1),
                     broadcast_expected(3),
                     "bcast_wrong_group_src_w4_three", group=[0, 2, 3], block=2,
                     meta={"label": LABEL, "bug": "wrong-shard-offset",
                           "bug_node": "add", "bug_op": "aten.add"})
