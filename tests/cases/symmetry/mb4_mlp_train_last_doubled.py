"""Bug: the last of 4 microbatches' loss is doubled (on every rank): only that microbatch's
program differs, and the finding must name it (issue 16)."""
from mb4_mlp_train import CountedMicrobatches, case as mb4_case

WORLD_SIZES = (2,)


class LastDoubled(CountedMicrobatches):
    def microbatch_loss(self, mb, total_tokens, train):
        loss = super().microbatch_loss(mb, total_tokens, train)
        self.seen += 1
        if self.seen == train.microbatches:
            loss = loss * 2  # BUG: the last microbatch counted twice
        return loss


def case(world_size: int = 2):
    return mb4_case(world_size, model=LastDoubled, name="mb4_mlp_train_last_doubled")
