"""Bug: dp rank 5 alone multiplies one all-reduced gradient by 1.5 (dp8_mlp_train_late_scale.py
with another scalar on one rank): its graph is its class's up to one node after the dp
all_reduce, so only rank 5's gradient and update are wrong."""
from dp8_mlp_train_late_scale import LateScaled, case as late_case

WORLD_SIZES = (8,)
BUG_RANK = 5


class Rank5Late(LateScaled):
    def late_scale(self) -> float:
        return 1.5 if self.mesh.dp_rank == BUG_RANK else 1.0  # BUG: one dp rank's gradient scaled


def case(world_size: int = 8):
    return late_case(world_size, model=Rank5Late, name="dp8_mlp_train_rank5_late")
