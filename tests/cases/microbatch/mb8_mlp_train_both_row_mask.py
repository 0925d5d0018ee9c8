"""Correct (odd): the parallel step's row mask before the loop and the single-device loss's
row mask agree (each dp chunk's rows from 6 on weigh nothing on both sides; issue 16: not a
violation)."""
from mb8_mlp_train import case as mb8_case
from mb8_rows import RowMaskedMicrobatches, global_weights, single_loss, weighted_loss

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    return mb8_case(world_size, model=RowMaskedMicrobatches, name="mb8_mlp_train_both_row_mask",
                    train=single_loss(weighted_loss(global_weights)))
