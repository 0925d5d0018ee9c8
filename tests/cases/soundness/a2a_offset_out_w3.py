"""all_to_all_single into a contiguous view with a storage offset."""
from collective_cases import make_case, a2a_single_step, all_to_all_expected

WORLD_SIZES = (3,)
LABEL = "correct"


def case(world_size=3):
    return make_case(world_size, a2a_single_step(out_buffer='offset'),
                     all_to_all_expected,
                     "a2a_offset_out_w3", group=None, block=3,
                     meta={"label": LABEL})
