"""Sequence parallelism over a replicated block (the data layout of DeepSpeed Ulysses, as in
src/shardproof/zoo/train/sp_replicated_train.py) with the loss DeepSpeed users write: each rank
averages the loss over its own tokens (its shard's masked sum over the per-rank token count,
the global count / sp; the mean over the rank's tokens when the shards hold equally many),
which makes the summed gradients sp times the whole-batch ones. So the gradients are
averaged: all_reduce over the sequence-parallel group, then divided by its size (the
division `tensor_to_allreduce.div_` that DeepSpeed issue 5248 asks for), and the reported
loss likewise. 2 microbatches, AdamW, no clipping (DeepSpeed's default; a saturated clip
would hide a gradient scale). The correct twin of
src/shardproof/zoo/train/bugs/deepspeed_5248_sp_grad_not_divided.py.

    shardproof verify src/shardproof/zoo/train/sp_replicated_train_averaged.py --world-size 2
"""
from mini_megatron import all_reduce, token_mean_loss
from shardproof import AdamW, Train
from sp_replicated_train import TrainSequenceParallelReplicated, case as sp_case

MESHES = ((1, 2),)  # (dp, sp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2)


class PerRankMeanAveraged(TrainSequenceParallelReplicated):
    def microbatch_loss(self, mb, total_tokens, train):
        return super().microbatch_loss(mb, total_tokens / self.mesh.tp, train)

    def reduce_gradients(self, grads):
        return {n: all_reduce(g, self.mesh.tp_group) / self.mesh.tp for n, g in grads.items()}

    def result(self, loss, params, grads, state, train):
        return super().result(loss / self.mesh.tp, params, grads, state, train)


def case(world_size: int = 2, dp: int = 1, model=PerRankMeanAveraged, name="sp_replicated_train_averaged",
         meta=None):
    return sp_case(world_size, dp=dp, model=model, train=TRAIN, name=name,
                   meta=meta or {"source": "DeepSpeed issue 5248 (the fix: per-rank mean loss, gradients averaged)"})
