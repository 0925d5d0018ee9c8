"""Llama training step on a 4-D dp2 x pp2 x tp2 x cp2 mesh (16 ranks): the dp x pp x tp step of
``pipeline_llama_3d.py`` with context parallelism inside attention, DeepSpeed-Ulysses style
(``zoo/train/mini_mesh.py``): each rank holds a sequence shard; q/k/v trade it for a head shard
by an all_to_all over the cp group, RoPE and causal attention run over the whole sequence, and
a second all_to_all trades back. Gradients are all-reduced over the dp x cp group (Megatron's
data-parallel group with context parallelism); 2 microbatches under 1F1B; small shapes (8 query
and 4 KV heads of dimension 2, so that every cp rank keeps the KV head of its query heads).

    shardproof verify src/shardproof/zoo/train/pipeline_llama_4d.py --world-size 16
"""
from mini_mesh import MeshUlyssesTraining
from pipeline_llama_3d import case as mesh_case

WORLD_SIZES = (16,)


def case(world_size: int = 16, **kw):
    kw.setdefault("microbatches", 2)
    kw.setdefault("batch", 4)
    kw.setdefault("heads", 8)  # 4 query and 2 KV heads per tp rank: 2 and 1 per cp rank
    kw.setdefault("kv_heads", 8)
    return mesh_case(world_size, cp=2, model=MeshUlyssesTraining, name="pipeline_llama_4d",
                     meta={"source": "Megatron-style dp x pp x tp x cp Llama step: 1F1B, TP f/g, Ulysses CP"}, **kw)
