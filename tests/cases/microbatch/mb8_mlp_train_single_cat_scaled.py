"""Bug: the single-device loss counts the global batch's last two rows twice (a cat of the
batch's first rows and the last ones scaled); the parallel loop counts every row once. The
rows are rank 1's microbatches 6-7, after the three the induction checks (issue 16)."""
from mb8_mlp_train import case as mb8_case
from mb8_rows import cat_scaled_loss, single_loss

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    return mb8_case(world_size, name="mb8_mlp_train_single_cat_scaled", train=single_loss(cat_scaled_loss))
