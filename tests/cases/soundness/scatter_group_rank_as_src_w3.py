"""BUG: scatters from global rank 1 where the owner is global rank 2."""
from collective_cases import make_case, scatter_expected, scatter_step

WORLD_SIZES = (3,)
LABEL = "bug"


def case(world_size=3):
    return make_case(world_size, scatter_step(root=1),
                     scatter_expected(2),
                     "scatter_group_rank_as_src_w3", group=[1, 2], block=2,
                     meta={"label": LABEL, "bug": "wrong-operand",
                           "bug_node": "add", "bug_op": "aten.add"})
