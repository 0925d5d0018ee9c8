"""Correct (odd): both steps weight each row's error by a weight of its global row id (the
parallel one from ids built before the loop and split with the batch; issue 16)."""
from mb8_mlp_train import case as mb8_case
from mb8_rows import RowIdMicrobatches, row_weighted_loss, single_loss

WORLD_SIZES = (2,)


def case(world_size: int = 2, model=RowIdMicrobatches, name="mb8_mlp_train_row_ids"):
    return mb8_case(world_size, model=model, name=name, train=single_loss(row_weighted_loss))
