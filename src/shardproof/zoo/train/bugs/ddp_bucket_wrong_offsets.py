"""Bug: a DDP-style bucket (src/shardproof/zoo/train/ddp_bucket_train.py) is flattened in the
order the gradients become ready (reverse registration order) but unflattened at offsets
computed in registration order, so each parameter's gradient is read from the wrong stretch
of the reduced buffer (shifted by the other parameter's size). Expected (dp2): the first
finding at the slice that cuts the first misplaced gradient out of the buffer, on every rank."""
from ddp_bucket_train import BucketedGradients, case as bucket_case

WORLD_SIZES = (2,)


class RegistrationOrderOffsets(BucketedGradients):
    def offsets(self, grads, bucket):
        registered = [n for n in grads if n in bucket]  # BUG: not the order the bucket was flattened in
        return super().offsets(grads, registered)


def case(world_size: int = 2):
    return bucket_case(world_size, dp=2, model=RegistrationOrderOffsets, name="ddp_bucket_wrong_offsets",
                       meta={"source": "DDP bucket unflattening (offsets out of step with the flattening order)",
                             "bug_op": "aten.slice", "bug_ranks": "all", "bug": "wrong-shard-offset",
                             "hint": r"offset", "bug_line": "flat[start:end]",
                             "bug_node": "slice_3", "bug_source": "ddp_bucket_train.py"})
