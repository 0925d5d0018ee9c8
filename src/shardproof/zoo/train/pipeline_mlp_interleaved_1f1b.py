"""Pipeline-parallel training step of an MLP stack (4 blocks of Linear + tanh) under
Megatron's interleaved 1F1B (zoo/train/mini_interleaved.py): two model chunks per rank
(virtual stages chunk * pp + stage, one block each at pp2), 4 microbatches, loss normalised by
the global token count; the single-device reference is the whole stack's step.

    shardproof verify src/shardproof/zoo/train/pipeline_mlp_interleaved_1f1b.py --world-size 2
"""
from mini_interleaved import InterleavedPipelineTraining
from pipeline_mlp_1f1b import case as pipeline_case

WORLD_SIZES = (2,)


def case(world_size: int = 2, **kw):
    return pipeline_case(world_size, model=InterleavedPipelineTraining, name="pipeline_mlp_interleaved_1f1b",
                         meta={"source": "Megatron-style interleaved 1F1B (virtual stages, isend/irecv)"}, **kw)
