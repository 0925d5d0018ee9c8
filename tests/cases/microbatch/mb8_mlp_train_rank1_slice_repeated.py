"""Bug: on dp rank 1 only, microbatch 5 computes its loss on microbatch 4's rows again (the
slice kept from microbatch 4); rank 0 runs the correct step. Rank 1's eager record differs
from rank 0's only in *which* slice of the batch split before the loop one microbatch reads
(``("pre", op, 4)`` where every other reads its own, ``"m"``): the rank's fingerprint key,
computed from the loop's segment-relative record (frontends/microbatches.py), must keep
that apart, or rank 1 would be derived from rank 0 and the bug never seen."""
from mb8_mlp_train import CountedMicrobatches, case as mb8_case

WORLD_SIZES = (2,)


class Rank1SliceRepeated(CountedMicrobatches):
    def microbatch_loss(self, mb, total_tokens, train):
        if self.seen == 4:
            self.kept = mb
        self.seen += 1
        if self.mesh.dp_rank == 1 and self.seen == 6:
            mb = self.kept  # BUG: rank 1's microbatch 5 on microbatch 4's rows
        return super().microbatch_loss(mb, total_tokens, train)


def case(world_size: int = 2):
    return mb8_case(world_size, model=Rank1SliceRepeated, name="mb8_mlp_train_rank1_slice_repeated")
