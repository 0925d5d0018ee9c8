"""Bug: the parallel step scales its rows from 6 on by 2 before the loop (a cat of two
differently processed parts of its batch); microbatches 6-7 read the scaled rows, after the
three the induction checks (issue 16: the slices are not one term in every microbatch)."""
from mb8_mlp_train import case as mb8_case
from mb8_rows import CatScaledMicrobatches

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    return mb8_case(world_size, model=CatScaledMicrobatches, name="mb8_mlp_train_parallel_cat_scaled")
