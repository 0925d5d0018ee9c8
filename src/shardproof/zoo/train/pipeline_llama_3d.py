"""Llama training step on a dp2 x pp2 x tp2 mesh (8 ranks): two Llama blocks
(src/shardproof/zoo/llama_block.py: RMSNorm, GQA attention with RoPE, SwiGLU), one per pipeline
stage, each Megatron tensor-parallel over its tp group (f/g operators), 4 microbatches under the
1F1B schedule of ``mini_pipeline.py`` (``batch_isend_irecv`` exchanges between the stages' ranks
of the same dp and tp coordinates), the loss normalised by the global token count, gradients
all-reduced over the dp group. Process groups per axis (``zoo/train/mini_mesh.py``, Megatron's
rank order). The single-device reference is the whole two-block model's step.

    shardproof verify src/shardproof/zoo/train/pipeline_llama_3d.py --world-size 8
"""
import torch

from llama_block import LlamaBlock
from mini_mesh import MeshPipelineTraining, mesh_inputs
from mini_pipeline import Stack, regression_batch, token_mean_loss
from shardproof import Case, Train

BATCH, SEQ, HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 8, 4, 16, 4, 2, 32, 2
WORLD_SIZES = (8,)


def case(world_size: int = 8, pp: int = 2, tp: int = 2, cp: int = 1, microbatches: int = 4,
         model=MeshPipelineTraining, batch: int = BATCH, heads: int = HEADS, kv_heads: int = KV_HEADS,
         name: str = "pipeline_llama_3d", meta=None, layers: int = LAYERS) -> Case:
    """dp = world_size / (pp * tp * cp)."""
    torch.manual_seed(0)
    full = Stack([LlamaBlock(HIDDEN, heads, kv_heads, FFN) for _ in range(layers)])
    dp = world_size // (pp * tp * cp)
    # a piece on two dims (batch over dp, sequence over cp) is stated, not inferred
    mesh = f"Mesh([{pp}, {dp}, {tp}, {cp}], (Replicate(), Shard(0), Replicate(), Shard(1)))"
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, pp, tp, cp),
                inputs=regression_batch(batch, SEQ, HIDDEN), dist_inputs=mesh_inputs(pp, tp, cp),
                relations={n: mesh for n in ("x", "target", "mask")} if cp > 1 else None,
                world_size=world_size, train=Train(loss=token_mean_loss, microbatches=microbatches), name=name,
                meta=meta or {"source": "Megatron-style dp x pp x tp Llama step, 1F1B (batch_isend_irecv)"})
