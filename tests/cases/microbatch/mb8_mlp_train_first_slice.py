"""Bug: every microbatch computes its loss on the first microbatch's slice of the batch (the
slice kept from microbatch 0): one program in every generic microbatch, so the loop is
derived, but the slices do not move along the batch (issue 16: the induction must not
conclude the whole batch's gradient)."""
from mb8_mlp_train import CountedMicrobatches, case as mb8_case

WORLD_SIZES = (2,)


class FirstSliceEveryTime(CountedMicrobatches):
    def microbatch_loss(self, mb, total_tokens, train):
        if self.seen == 0:
            self.first = mb
        self.seen += 1
        return super().microbatch_loss(self.first, total_tokens, train)  # BUG: always microbatch 0's rows


def case(world_size: int = 2):
    return mb8_case(world_size, model=FirstSliceEveryTime, name="mb8_mlp_train_first_slice")
