"""DeepSpeed-style sequence parallelism (Ulysses' data layout) around the LayerNorm + MLP block
of src/shardproof/zoo/sp_mlp.py: every parameter is replicated, each rank runs the whole block
on its shard of the sequence; each rank's loss is its tokens' share of the global mean (the
masked sum over the global token count), so the gradients, all-reduced (summed) over the
sequence-parallel group, are the whole-batch gradients. 2 microbatches, clipping, AdamW.

Fidelity: Ulysses' all_to_all (sequence <-> heads) sits in attention; this block is
token-wise, so the gradient reduction -- where DeepSpeed issue 5248 is -- is the same and no
all_to_all is needed.

    shardproof verify src/shardproof/zoo/train/sp_replicated_train.py --world-size 2
"""
import torch

from mini_megatron import MegatronTraining, all_reduce, token_mean_loss
from shardproof import AdamW, Case, Train
from sp_mlp import Block
from sp_mlp_train import sequence_batch, shard_sequence

MESHES = ((1, 2),)  # (dp, sp)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class ReplicatedBlock(Block):
    def __init__(self, full: Block, rank: int, world: int):
        super().__init__()
        self.load_state_dict(full.state_dict())


class TrainSequenceParallelReplicated(MegatronTraining, ReplicatedBlock):
    """The mesh's tp axis is the sequence-parallel axis."""
    microbatch_dim = 1

    def global_tokens(self, batch):
        return all_reduce(batch["mask"].sum(), self.mesh.tp_group)

    def reduce_gradients(self, grads):
        return {n: all_reduce(g, self.mesh.tp_group) for n, g in grads.items()}

    def grad_norm(self, grads):
        """Every gradient is whole on every rank once reduced: the local norm is the global one."""
        return torch.sqrt(sum((g * g).sum() for g in grads.values()))

    def result(self, loss, params, grads, state, train):
        return super().result(all_reduce(loss, self.mesh.tp_group), params, grads, state, train)


def case(world_size: int = 2, dp: int = 1, model=TrainSequenceParallelReplicated, train=TRAIN,
         name="sp_replicated_train", meta=None) -> Case:
    """Sequence parallel over all ranks (`dp` must be 1)."""
    assert dp == 1, "this example is sequence parallel only"
    torch.manual_seed(0)
    full = Block()
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, world), inputs=sequence_batch(),
                dist_inputs=shard_sequence, world_size=world_size, train=train, name=name,
                meta=meta or {"source": "DeepSpeed sequence parallel (Ulysses) gradient averaging"})
