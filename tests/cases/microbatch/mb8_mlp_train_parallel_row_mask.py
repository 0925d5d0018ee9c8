"""Bug: the parallel step builds a row mask before the loop, ``(arange(rows) < 6)``, and each
microbatch weights its rows by its slice of it: microbatches 6-7 contribute nothing; the
single-device step does not mask (issue 16: the slices move by one step, the values do not)."""
from mb8_mlp_train import case as mb8_case
from mb8_rows import RowMaskedMicrobatches

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    return mb8_case(world_size, model=RowMaskedMicrobatches, name="mb8_mlp_train_parallel_row_mask")
