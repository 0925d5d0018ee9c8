"""DTensor tensor-parallel GPT-2 block (the gpt2_block model).

The fused ``c_attn`` Linear(h, 3h) stacks [q | k | v] rows; ColwiseParallel would hand rank r a
contiguous row block that mixes q, k and v. So the distributed copy first reorders the fused
rows per head group, [q_0 k_0 v_0 | q_1 k_1 v_1 | ...] (Megatron's layout), after which
ColwiseParallel gives rank r exactly [q_r | k_r | v_r]; its forward chunks the local fused
output in three and infers the local head count (``-1``, as torchtitan does). ``c_proj`` and
``mlp_proj`` are RowwiseParallel, ``c_fc`` ColwiseParallel; LayerNorms and residuals replicated.

    shardproof verify src/shardproof/zoo/dtensor_gpt2_block.py --world-size 4
"""
import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from shardproof import Case
from gpt2_block import BATCH, HIDDEN, SEQ, GPT2Block

WORLD_SIZES = (2, 3, 4, 6, 8)

PLAN = {
    "c_attn": ColwiseParallel(),
    "c_proj": RowwiseParallel(),
    "c_fc": ColwiseParallel(),
    "mlp_proj": RowwiseParallel(),
}


class LocalHeadsGPT2Block(GPT2Block):
    """GPT2Block whose attention works on the heads its (per-head-group) c_attn rows hold."""

    def _heads(self, t):
        b, s, _ = t.shape
        return t.view(b, s, -1, self.head_dim).transpose(1, 2)

    def attn(self, x):
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).chunk(3, dim=-1)
        o = F.scaled_dot_product_attention(self._heads(q), self._heads(k), self._heads(v), is_causal=True)
        return self.c_proj(o.transpose(1, 2).reshape(b, s, -1))


def group_qkv_rows(t: torch.Tensor, world: int) -> torch.Tensor:
    """[q | k | v] rows -> [q_0 k_0 v_0 | ... | q_{w-1} k_{w-1} v_{w-1}]."""
    return t.reshape(3, world, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def parallelize(full: GPT2Block, rank: int, world: int) -> LocalHeadsGPT2Block:
    model = LocalHeadsGPT2Block(full.hidden, full.heads, full.c_fc.out_features)
    model.load_state_dict(full.state_dict())
    with torch.no_grad():
        model.c_attn.weight.copy_(group_qkv_rows(full.c_attn.weight, world))
        model.c_attn.bias.copy_(group_qkv_rows(full.c_attn.bias, world))
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(model, mesh, PLAN)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = GPT2Block()
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="dtensor_gpt2_block", meta={"source": "DTensor parallelize_module"},
                description="gpt2_block parallelized with DTensor; fused c_attn rows regrouped per head group",
                expect={"out": "Replicate()"})
