"""Bug: the single-device step masks out each dp chunk's rows from 6 on (a constant row mask
from ``arange`` over the batch, in its loss); the parallel loop does not. Rows 6-7 are in
microbatches 6-7, after the three the induction checks (issue 16)."""
from mb8_mlp_train import case as mb8_case
from mb8_rows import global_weights, single_loss, weighted_loss

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    return mb8_case(world_size, name="mb8_mlp_train_single_row_mask", train=single_loss(weighted_loss(global_weights)))
