"""Correct: as mb8_mlp_train_row_ids with every row's id 3 on both sides: the slices of ids
built before the loop are equal by value in every microbatch (issue 16: the induction's
precondition holds)."""
from mb8_mlp_train_row_ids import case as row_ids_case
from mb8_rows import SameRowIdMicrobatches, same_row_weighted_loss, single_loss

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    base = row_ids_case(world_size, model=SameRowIdMicrobatches, name="mb8_mlp_train_same_row_ids")
    base.train = single_loss(same_row_weighted_loss)
    return base
