"""Pipeline-parallel training step of a two-block Llama (src/shardproof/zoo/llama_block.py:
RMSNorm, GQA attention with RoPE, SwiGLU) under Megatron's 1F1B schedule with
``batch_isend_irecv`` exchanges (zoo/train/mini_pipeline.py), pp2, one block per stage, 4
microbatches; the single-device reference is the whole two-block model's step.

    shardproof verify src/shardproof/zoo/train/pipeline_llama_1f1b.py --world-size 2
"""
from llama_block import LlamaBlock
from mini_pipeline import regression_batch
from pipeline_mlp_1f1b import case as pipeline_case

BATCH, SEQ, HIDDEN, HEADS, KV_HEADS, FFN = 4, 4, 16, 4, 2, 32
WORLD_SIZES = (2,)


def case(world_size: int = 2, **kw):
    return pipeline_case(world_size, blocks=lambda: [LlamaBlock(HIDDEN, HEADS, KV_HEADS, FFN) for _ in range(2)],
                         batch=lambda: regression_batch(BATCH, SEQ, HIDDEN), name="pipeline_llama_1f1b",
                         meta={"source": "Megatron-style 1F1B pipeline of Llama blocks (batch_isend_irecv)"}, **kw)
