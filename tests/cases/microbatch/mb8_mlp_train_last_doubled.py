"""Bug: the last of 8 microbatches' loss is doubled (on every rank): only that microbatch's
program differs; the finding must name microbatch 7 (issue 16)."""
from mb8_mlp_train import CountedMicrobatches, case as mb8_case

WORLD_SIZES = (2,)


class LastDoubled(CountedMicrobatches):
    def microbatch_loss(self, mb, total_tokens, train):
        loss = super().microbatch_loss(mb, total_tokens, train)
        self.seen += 1
        if self.seen == train.microbatches:
            loss = loss * 2  # BUG: the last microbatch counted twice
        return loss


def case(world_size: int = 2):
    return mb8_case(world_size, model=LastDoubled, name="mb8_mlp_train_last_doubled")
