"""Llama training step on a 4-D dp2 x pp2 x tp2 x cp2 mesh (16 ranks): the dp x pp x tp step of
``pipeline_llama_3d.py`` with context parallelism inside attention, DeepSpeed-Ulysses style
(``zoo/train/mini_mesh.py``): each rank holds a sequence shard; q/k/v trade it for a head shard
by an all_to_all over the cp group, RoPE and causal attention run over the whole sequence, and
a second all_to_all trades back. Gradients, loss and token count are summed over cp, then over
dp; 2 microbatches under 1F1B; small shapes (8 heads
of dimension 2, one sequence of 4 tokens per microbatch).

Correct on a real gloo group and verified (tests/test_pipeline_mesh.py, sweep: ~45 s alone).
The activation each stage sends is a (microbatch, sequence half) block of the residual stream,
flattened for the P2P: its term is the sum of the flattened operands (a rewrite), and viewed
back on the receiving stage it is found as the block of the sum itself
(``TermStore.reshaped_from``); tests/test_fourd.py proves the same rules on a pp2 x cp2 step,
and grouped-query attention under Ulysses (KV heads split with their query heads, or repeated
before the split when fewer than the cp ranks) on its own.

    shardproof verify src/shardproof/zoo/train/pipeline_llama_4d.py --world-size 16
"""
from mini_mesh import MeshUlyssesTraining
from pipeline_llama_3d import case as mesh_case

WORLD_SIZES = (16,)


def case(world_size: int = 16, **kw):
    kw.setdefault("microbatches", 2)
    kw.setdefault("batch", 4)
    kw.setdefault("heads", 8)  # 4 heads per tp rank, 2 per cp rank
    kw.setdefault("kv_heads", 4)  # 2 KV heads per tp rank, 1 per cp rank
    kw.setdefault("model", MeshUlyssesTraining)
    kw.setdefault("name", "pipeline_llama_4d")
    kw.setdefault("meta", {"source": "Megatron-style dp x pp x tp x cp Llama step: 1F1B, TP f/g, Ulysses CP"})
    return mesh_case(world_size, cp=2, **kw)
