"""Bug: each dp rank re-reads its batch slice with as_strided at storage offset 0 (absolute):
rank r>0 reads rank 0's rows (its slice is a view of the batch at another offset). Label (gloo,
tests/test_dpflat.py): every rank's gradients differ after the dp all_reduce."""
from dp8_mlp_train import case as dp8_case
from tp_mlp_train import TrainParallelMLP


class Strided(TrainParallelMLP):
    def forward(self, x):
        return super().forward(x.as_strided(x.shape, x.stride(), 0))


def case(world_size: int = 8, model=Strided, name="dp8_mlp_train_strided_abs"):
    return dp8_case(world_size, model=model, name=name)
