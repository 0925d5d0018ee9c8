"""Bug (HF transformers PR 34191): with gradient accumulation each microbatch's loss is
averaged over its own tokens and the microbatches are averaged, instead of normalising the
summed loss by the global token count; with masked tokens the counts differ, so the
gradients are wrongly weighted. Expected: the first finding at the microbatch loss division."""
from mini_megatron import masked_sq_error
from tp_mlp_train import TrainParallelMLP, case as mlp_case

WORLD_SIZES = (2,)


class LossMeanPerMicrobatch(TrainParallelMLP):
    def microbatch_loss(self, mb, total_tokens, train):
        local_mean = masked_sq_error(self(x=mb["x"]), mb) / mb["mask"].sum()  # BUG: this microbatch's tokens only
        return local_mean / (train.microbatches * self.mesh.dp)


def case(world_size: int = 2):
    return mlp_case(world_size, dp=1, model=LossMeanPerMicrobatch, name="loss_mean_per_microbatch",
                    meta={"source": "HF transformers PR 34191",
                          "bug_op": "aten.div", "bug_ranks": "all", "bug": "wrong-normalization",
                          "hint": r"global count",
                          "bug_node": "div", "bug_source": "loss_mean_per_microbatch.py:13"})
