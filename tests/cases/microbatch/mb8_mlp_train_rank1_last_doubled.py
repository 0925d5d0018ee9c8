"""Bug: on dp rank 1 only, the last of 8 microbatches' loss is doubled. Rank 1's eager record
differs from rank 0's, so it is its own rank class, and its loop must be derived from its own
record (the one its fingerprint's eager run made: frontends/microbatches.py, issue 16): the
finding names rank 1's class and microbatch 7. Rank 0 runs the correct step."""
from mb8_mlp_train import case as mb8_case
from mb4_mlp_train import CountedMicrobatches

WORLD_SIZES = (2,)


class Rank1LastDoubled(CountedMicrobatches):
    def microbatch_loss(self, mb, total_tokens, train):
        loss = super().microbatch_loss(mb, total_tokens, train)
        self.seen += 1
        if self.mesh.dp_rank == 1 and self.seen == train.microbatches:
            loss = loss * 2  # BUG: rank 1's last microbatch counted twice
        return loss


def case(world_size: int = 2):
    return mb8_case(world_size, model=Rank1LastDoubled, name="mb8_mlp_train_rank1_last_doubled")
