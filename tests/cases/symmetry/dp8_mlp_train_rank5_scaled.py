"""Bug: dp rank 5 alone scales its loss by 1.5 (a rank-specific constant; every rank runs the
same ops, rank 5 with another scalar): its gradient contribution to the dp all_reduce is 1.5x.
Rank 5's program differs from the others', so it is its own class (issue 16: the symmetry
must not hide it)."""
from dp8_mlp_train import case as dp8_case
from tp_mlp_train import TrainParallelMLP

WORLD_SIZES = (8,)
BUG_RANK = 5


class Rank5Scaled(TrainParallelMLP):
    def microbatch_loss(self, mb, total_tokens, train):
        scale = 1.5 if self.mesh.dp_rank == BUG_RANK else 1.0  # BUG: one dp rank's loss scaled
        return super().microbatch_loss(mb, total_tokens, train) * scale


def case(world_size: int = 8):
    return dp8_case(world_size, model=Rank5Scaled, name="dp8_mlp_train_rank5_scaled")
