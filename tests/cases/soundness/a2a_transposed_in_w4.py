"""BUG: a non-contiguous input (gloo and NCCL refuse it)."""
from collective_cases import make_case, a2a_single_step, all_to_all_expected

WORLD_SIZES = (4,)
LABEL = "bug"


def case(world_size=4):
    return make_case(world_size, a2a_single_step(in_buffer='transposed'),
                     all_to_all_expected,
                     "a2a_transposed_in_w4", group=[1, 3], block=2,
                     meta={"label": LABEL, "bug": "non-contiguous-buffer",
                           "bug_node": "all_to_all_single", "bug_op": "_c10d_functional.all_to_all_single"})
