"""Training step of two Llama blocks with grouped-query attention (8 query heads, 4 KV heads)
under DeepSpeed-Ulysses context parallelism over all ranks (cp = world size, one pipeline
stage, no tp/dp: ``mini_mesh.py``): each rank holds a sequence shard; q and k/v trade it for a
head shard by all_to_alls (each cp rank keeping its query heads' KV heads: 2 KV heads per rank
at cp 2, 1 at cp 4), RoPE and causal attention with the KV heads repeated per group run over
the whole sequence, a second all_to_all trades back; gradients, loss and token count are
summed over cp.

    shardproof verify src/shardproof/zoo/train/ulysses_gqa_train.py --world-size 4
"""
from mini_mesh import MeshUlyssesTraining
from pipeline_llama_3d import case as mesh_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2, **kw):
    kw.setdefault("microbatches", 1)
    kw.setdefault("batch", 2)
    kw.setdefault("heads", 8)
    kw.setdefault("kv_heads", 4)
    kw.setdefault("name", "ulysses_gqa_train")
    kw.setdefault("meta", {"source": "DeepSpeed-Ulysses training step, grouped-query attention"})
    kw.setdefault("model", MeshUlyssesTraining)
    return mesh_case(world_size, pp=1, tp=1, cp=world_size, **kw)
