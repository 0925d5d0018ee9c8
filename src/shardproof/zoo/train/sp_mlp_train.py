"""Training step of the sequence-parallel MLP block (src/shardproof/zoo/sp_mlp.py) with Megatron's
sequence-parallel operators (all_gather / reduce_scatter along the sequence, each the
other's backward): the LayerNorm and the fc2 bias act on each rank's sequence shard, so
their gradients are partial sums over tp and are all-reduced before the update (as
Megatron does for sequence-parallel parameters). Microbatches split the batch (dim 1).

    shardproof verify src/shardproof/zoo/train/sp_mlp_train.py --world-size 4
"""
import torch

from mini_megatron import (GatherFromSequenceParallel, MegatronTraining, ReduceScatterToSequenceParallel,
                           all_reduce, token_mean_loss)
from shardproof import Case
from shardproof import AdamW, Train
from sp_mlp import BATCH, HIDDEN, SEQ, Block, SequenceParallelBlock

MESHES = ((1, 2), (1, 4))  # (dp, tp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class TrainSequenceParallelBlock(MegatronTraining, SequenceParallelBlock):
    replicated = frozenset({"ln.weight", "ln.bias", "fc2.bias"})
    sequence_parallel = frozenset({"ln.weight", "ln.bias", "fc2.bias"})
    microbatch_dim = 1

    def gather_sequence(self, h):
        return GatherFromSequenceParallel.apply(h, self.mesh.tp_group)

    def scatter_sequence(self, y):
        return ReduceScatterToSequenceParallel.apply(y, self.mesh.tp_group)

    def global_tokens(self, batch):
        return all_reduce(all_reduce(batch["mask"].sum(), self.mesh.tp_group), self.mesh.dp_group)

    def result(self, loss, params, grads, state, train):
        return super().result(all_reduce(loss, self.mesh.tp_group), params, grads, state, train)


def sequence_batch() -> dict:
    """Sequence-first inputs, regression targets and a token mask."""
    return {"x": torch.randn(SEQ, BATCH, HIDDEN), "target": torch.randn(SEQ, BATCH, HIDDEN),
            "mask": (torch.rand(SEQ, BATCH) > 0.3).long()}


def shard_sequence(rank, world, inputs):
    return {k: v.chunk(world, 0)[rank] for k, v in inputs.items()}


def case(world_size: int = 2, dp: int = 1, model=TrainSequenceParallelBlock, train=TRAIN, name="sp_mlp_train",
         meta=None) -> Case:
    """Sequence parallel over all ranks (`dp` must be 1)."""
    assert dp == 1, "this example is tensor/sequence parallel only"
    torch.manual_seed(0)
    full = Block()
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, world), inputs=sequence_batch(),
                dist_inputs=shard_sequence, world_size=world_size, train=train, name=name,
                meta=meta or {"source": "Megatron SP training step"})
