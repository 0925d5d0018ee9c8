"""Pipeline-parallel training step of an MLP stack (4 blocks of Linear + tanh) under
Megatron's 1F1B schedule with ``batch_isend_irecv`` exchanges (zoo/train/mini_pipeline.py):
4 microbatches, loss normalised by the global token count, gradients all-reduced over dp.
World = pp x dp; the single-device reference is the whole stack's step.

    shardproof verify src/shardproof/zoo/train/pipeline_mlp_1f1b.py --world-size 2   # pp2
    shardproof verify src/shardproof/zoo/train/pipeline_mlp_1f1b.py --world-size 4   # pp4 (or pp=2, dp=2)
"""
import torch

from mini_pipeline import PipelineTraining, Stack, mlp_block, pipeline_inputs, regression_batch, token_mean_loss
from shardproof import Case, Train

BATCH, SEQ, HIDDEN, LAYERS = 8, 2, 4, 4
WORLD_SIZES = (2, 4)
TRAIN = Train(loss=token_mean_loss, microbatches=4)


def case(world_size: int = 2, pp: int | None = None, model=PipelineTraining, name="pipeline_mlp_1f1b",
         meta=None, blocks=None, batch=None) -> Case:
    """`blocks`, `batch`: factories of the blocks and the data (called after seeding)."""
    torch.manual_seed(0)
    pp = pp or world_size
    full = Stack(blocks() if blocks else [mlp_block(HIDDEN) for _ in range(LAYERS)])
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, pp),
                inputs=batch() if batch else regression_batch(BATCH, SEQ, HIDDEN), dist_inputs=pipeline_inputs(pp),
                world_size=world_size, train=TRAIN, name=name,
                meta=meta or {"source": "Megatron-style 1F1B pipeline (batch_isend_irecv)"})
