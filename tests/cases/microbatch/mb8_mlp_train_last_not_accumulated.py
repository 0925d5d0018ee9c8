"""Bug: the last of 8 microbatches' gradients replace the accumulated ones instead of adding
to them (a missing accumulation in that microbatch only; issue 16)."""
from mb8_mlp_train import CountedMicrobatches, case as mb8_case

WORLD_SIZES = (2,)


class LastNotAccumulated(CountedMicrobatches):
    def accumulate(self, grads, new, train):
        self.seen += 1
        if self.seen == train.microbatches:
            return dict(new)  # BUG: the earlier microbatches' gradients dropped
        return super().accumulate(grads, new, train)


def case(world_size: int = 2):
    return mb8_case(world_size, model=LastNotAccumulated, name="mb8_mlp_train_last_not_accumulated")
