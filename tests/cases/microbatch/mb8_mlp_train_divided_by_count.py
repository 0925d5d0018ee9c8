"""Bug: every microbatch's loss is divided by the microbatch count (``/ train.microbatches``)
although it is already normalised by the global token count: the gradient is 1/M of the
single-device one. One program in every microbatch (traced whole: the constant depends on M),
so the induction's step fits; its end -- the accumulated gradient against the single-device
gradient -- must not (issue 16: the loss scale proved, not assumed)."""
from mb8_mlp_train import CountedMicrobatches, case as mb8_case

WORLD_SIZES = (2,)


class DividedByCount(CountedMicrobatches):
    def microbatch_loss(self, mb, total_tokens, train):
        return super().microbatch_loss(mb, total_tokens, train) / train.microbatches  # BUG: normalised twice


def case(world_size: int = 2):
    return mb8_case(world_size, model=DividedByCount, name="mb8_mlp_train_divided_by_count")
