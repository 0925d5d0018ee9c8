"""Llama training step on a dp2 x pp2 x tp2 mesh (8 ranks) under Megatron's INTERLEAVED 1F1B
(``forward_backward_pipelining_with_interleaving``; zoo/train/mini_interleaved.py): four Llama
blocks, two model chunks per rank (virtual stage ``chunk * pp + stage``, one block each), each
block Megatron tensor-parallel over its tp group (zoo/train/mini_mesh.py), 4 microbatches, the
activations and gradients as tagged ``isend``/``irecv`` between the stages' ranks of the same
dp and tp coordinates, the loss normalised by the global token count, gradients all-reduced
over the dp group. The single-device reference is the whole four-block model's step
(pipeline_llama_3d.py is the same mesh under plain 1F1B).

    shardproof verify src/shardproof/zoo/train/pipeline_llama_3d_interleaved.py --world-size 8
"""
from mini_interleaved import InterleavedPipelineTraining
from mini_mesh import MeshPipelineTraining
from pipeline_llama_3d import case as mesh_case

WORLD_SIZES = (8,)


class MeshInterleavedTraining(InterleavedPipelineTraining, MeshPipelineTraining):
    """Interleaved 1F1B's order and virtual stages over the pp x dp x tp mesh's groups and
    tensor-parallel blocks (the mesh's token count, dp reduction and publication)."""


def case(world_size: int = 8, **kw):
    kw.setdefault("model", MeshInterleavedTraining)
    kw.setdefault("layers", 4)  # pp2 x 2 chunks: one block per virtual stage
    kw.setdefault("name", "pipeline_llama_3d_interleaved")
    kw.setdefault("meta", {"source": "Megatron-style dp x pp x tp Llama step, interleaved 1F1B (isend/irecv)"})
    out = mesh_case(world_size, **kw)
    # the 0/1 token mask's dp chunk also occurs at another row offset of this draw: stated, not inferred
    dp = world_size // 4
    out.relations = {n: f"Mesh([2, {dp}, 2], (Replicate(), Shard(0), Replicate()))" for n in ("x", "target", "mask")}
    return out
