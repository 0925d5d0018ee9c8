"""Bug: microbatch 3 of 8 has its loss doubled (``if mb == 3``): a microbatch in the middle of
the loop runs another program (issue 16)."""
from mb8_mlp_train import CountedMicrobatches, case as mb8_case

WORLD_SIZES = (2,)


class MiddleDoubled(CountedMicrobatches):
    def microbatch_loss(self, mb, total_tokens, train):
        loss = super().microbatch_loss(mb, total_tokens, train)
        if self.seen == 3:
            loss = loss * 2  # BUG: microbatch 3 counted twice
        self.seen += 1
        return loss


def case(world_size: int = 2):
    return mb8_case(world_size, model=MiddleDoubled, name="mb8_mlp_train_middle_doubled")
