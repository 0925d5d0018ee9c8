"""Bug: every microbatch doubles the gradients accumulated so far before adding its own
(``2 * grads + g``): one program in every generic microbatch, so the loop is derived, but the
state after m microbatches is not the previous one plus a piece (issue 16: the induction's
step must not fit)."""
from mb8_mlp_train import CountedMicrobatches, case as mb8_case

WORLD_SIZES = (2,)


class AccumulatorDoubled(CountedMicrobatches):
    def accumulate(self, grads, new, train):
        return {n: g if n not in grads else 2 * grads[n] + g for n, g in new.items()}  # BUG: 2 * grads


def case(world_size: int = 2):
    return mb8_case(world_size, model=AccumulatorDoubled, name="mb8_mlp_train_acc_doubled")
