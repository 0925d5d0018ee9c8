"""DTensor tensor-parallel causal self-attention (the tp_attention model).

ColwiseParallel q/k/v projections give each rank the heads of its slice as plain local
tensors; RowwiseParallel out_proj all-reduces. The single-device ``Attention`` hard-codes its
head count in ``view``; the distributed copy is a subclass whose forward infers it (``-1``, as
torchtitan does), which is the same computation on one device.

    shardproof verify src/shardproof/zoo/dtensor_attention.py --world-size 4
"""
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from shardproof import Case
from tp_attention import BATCH, HIDDEN, SEQ, Attention, causal_attention

WORLD_SIZES = (2, 3, 4, 6, 8)

PLAN = {
    "q_proj": ColwiseParallel(),
    "k_proj": ColwiseParallel(),
    "v_proj": ColwiseParallel(),
    "out_proj": RowwiseParallel(),
}


class LocalHeadsAttention(Attention):
    """Attention whose forward works on however many heads its projections hold."""

    def _split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, -1, self.head_dim).transpose(1, 2)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self._split(self.q_proj(x)), self._split(self.k_proj(x)), self._split(self.v_proj(x))
        o = causal_attention(q, k, v, self.scale)
        return self.out_proj(o.transpose(1, 2).reshape(b, s, -1))


def parallelize(full: Attention, rank: int, world: int) -> LocalHeadsAttention:
    model = LocalHeadsAttention(full.heads * full.head_dim, full.heads)
    model.load_state_dict(full.state_dict())
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(model, mesh, PLAN)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Attention()
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="dtensor_attention", meta={"source": "DTensor parallelize_module"},
                description="tp_attention parallelized with DTensor (Colwise q/k/v, Rowwise out_proj)",
                expect={"out": "Replicate()"})
