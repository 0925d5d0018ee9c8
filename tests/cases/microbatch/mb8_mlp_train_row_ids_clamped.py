"""Bug: as mb8_mlp_train_row_ids, but each microbatch clamps its row ids at the rank's row 5:
rows 6-7 (microbatches 6-7, after the three the induction checks) take row 5's weight. Every
microbatch runs one program; the weights' values are what differ (issue 16)."""
from mb8_mlp_train_row_ids import case as row_ids_case
from mb8_rows import ClampedRowIdMicrobatches

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    return row_ids_case(world_size, model=ClampedRowIdMicrobatches, name="mb8_mlp_train_row_ids_clamped")
