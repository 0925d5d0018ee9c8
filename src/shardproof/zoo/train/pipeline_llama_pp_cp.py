"""Llama training step on a pp2 x cp2 mesh (4 ranks): the 4-D step of ``pipeline_llama_4d.py``
with dp and tp of one, so that the pipeline's P2P of sequence shards (the flattened activation
of a (microbatch, sequence half) block sent forward, its gradient sent back) and Ulysses'
all_to_alls over cp are proved at a size ``make test`` affords. Two Llama blocks, one per
stage, 2 microbatches under 1F1B, gradients, loss and token count summed over cp.

    shardproof verify src/shardproof/zoo/train/pipeline_llama_pp_cp.py --world-size 4
"""
from mini_mesh import MeshUlyssesTraining
from pipeline_llama_3d import case as mesh_case

WORLD_SIZES = (4,)


def case(world_size: int = 4, model=MeshUlyssesTraining, name: str = "pipeline_llama_pp_cp", meta=None, **kw):
    kw.setdefault("microbatches", 2)
    kw.setdefault("batch", 2)
    return mesh_case(world_size, pp=2, tp=1, cp=2, model=model, name=name,
                     meta=meta or {"source": "Megatron-style pp x cp Llama step: 1F1B, Ulysses CP"}, **kw)
