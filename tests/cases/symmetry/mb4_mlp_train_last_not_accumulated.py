"""Bug: the last of 4 microbatches' gradients replace the accumulated ones instead of adding to
them (a missing accumulation in that microbatch only): only its program differs (issue 16)."""
from mb4_mlp_train import CountedMicrobatches, case as mb4_case

WORLD_SIZES = (2,)


class LastNotAccumulated(CountedMicrobatches):
    def accumulate(self, grads, new, train):
        self.seen += 1
        if self.seen == train.microbatches:
            return dict(new)  # BUG: the earlier microbatches' gradients dropped
        return super().accumulate(grads, new, train)


def case(world_size: int = 2):
    return mb4_case(world_size, model=LastNotAccumulated, name="mb4_mlp_train_last_not_accumulated")
