"""Correct at M=8, but each microbatch's loss is scaled by ``8 / train.microbatches`` (1 here):
a constant that depends on the microbatch count, so a run with fewer microbatches is another
program. The loop must not be derived from such a run (issue 16: the reduced run's record
must equal the full one's); the step is traced whole and verified."""
from mb8_mlp_train import CountedMicrobatches, case as mb8_case

WORLD_SIZES = (2,)


class CountScaled(CountedMicrobatches):
    def microbatch_loss(self, mb, total_tokens, train):
        return super().microbatch_loss(mb, total_tokens, train) * (8 / train.microbatches)


def case(world_size: int = 2):
    return mb8_case(world_size, model=CountScaled, name="mb8_mlp_train_count_scaled")
