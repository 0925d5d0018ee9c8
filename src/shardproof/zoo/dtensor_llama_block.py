"""DTensor tensor-parallel Llama-3 style block with grouped-query attention (the llama_block model).

Plan (torchtitan's): wq/wk/wv, w1, w3 ColwiseParallel; wo, w2 RowwiseParallel; RMSNorm weights,
RoPE tables and residuals replicated. The distributed copy is a subclass whose attention infers
its local head counts from the projections (``-1`` in ``view``, as torchtitan does); on one
device it is the same computation as ``LlamaBlock``.

torchtitan requires n_kv_heads % world == 0. When the world size exceeds the number of KV heads
(4 and 8 here, with 2 KV heads), wk/wv are left out of the plan (replicated) and each rank keeps
the one KV head its query heads attend with, ``q_head_offset // n_rep``.

    shardproof verify src/shardproof/zoo/dtensor_llama_block.py --world-size 8
"""
import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from shardproof import Case
from llama_block import BATCH, HIDDEN, SEQ, LlamaBlock, repeat_kv

WORLD_SIZES = (2, 4, 8)


class LocalHeadsLlamaBlock(LlamaBlock):
    """LlamaBlock whose attention works on however many heads its projections hold."""

    q_head_offset = 0  # global index of this rank's first query head

    def attention(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        group = self.n_heads // self.n_kv_heads  # query heads per KV head
        if k.shape[1] * group > q.shape[1]:  # replicated KV heads: keep this rank's group's one
            kv = self.q_head_offset // group
            k, v = k[:, kv:kv + 1], v[:, kv:kv + 1]
        q, k = self.rope(q), self.rope(k)
        o = F.scaled_dot_product_attention(q, repeat_kv(k, q.shape[1] // k.shape[1]),
                                           repeat_kv(v, q.shape[1] // v.shape[1]), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


def plan(n_kv_heads: int, world: int) -> dict:
    p = {"wq": ColwiseParallel(), "wo": RowwiseParallel(),
         "w1": ColwiseParallel(), "w3": ColwiseParallel(), "w2": RowwiseParallel()}
    if n_kv_heads % world == 0:
        p.update(wk=ColwiseParallel(), wv=ColwiseParallel())
    return p


def parallelize(full: LlamaBlock, rank: int, world: int) -> LocalHeadsLlamaBlock:
    model = LocalHeadsLlamaBlock(full.wq.in_features, full.n_heads, full.n_kv_heads, full.w1.out_features)
    model.load_state_dict(full.state_dict())
    model.q_head_offset = rank * (full.n_heads // world)
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(model, mesh, plan(full.n_kv_heads, world))


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = LlamaBlock()
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="dtensor_llama_block", meta={"source": "DTensor parallelize_module"},
                description="llama_block parallelized with DTensor (torchtitan plan; KV replicated "
                            "when world > n_kv_heads)",
                expect={"out": "Replicate()"})
