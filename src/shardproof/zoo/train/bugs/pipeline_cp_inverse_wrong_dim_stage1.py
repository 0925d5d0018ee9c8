"""Bug (4-D step, context parallelism on one pipeline stage): stage 1's Ulysses all_to_all back
from heads to sequence concatenates the received head groups along the head dim (dim 3)
instead of the heads (dim 1). The shapes still fit -- (B, H/cp, s, D * cp) reshaped to the
rank's (B, s, H * D) rows -- so the step runs, but every attention output row of stage 1 mixes
the head groups. Stage 0 is correct. Expected finding: on stage 1's ranks, in the first
microbatch's forward, the attention output after the wrong concatenation."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from mini_mesh import AllToAll, MeshUlyssesTraining, UlyssesLlamaBlock, _all_to_all
from llama_block import repeat_kv
from pipeline_llama_4d import case as fourd_case
from pipeline_llama_pp_cp import case as pp_cp_case

WORLD_SIZES = (4, 16)


class WrongDimBack(AllToAll):
    """Heads back to sequence, the received chunks concatenated along the head dim."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        send = [c.contiguous() for c in x.chunk(dist.get_world_size(group), dim=2)]
        recv = [torch.empty_like(c) for c in send]
        dist.all_to_all(recv, send, group=group)
        return torch.cat(recv, dim=3)

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad, 3, 2, ctx.group), None


class Stage1Block(UlyssesLlamaBlock):
    def attention(self, x):
        if self.stage == 0:
            return super().attention(x)
        b, s, _ = x.shape
        q, k, v = self.qkv(x)
        q, k, v = (AllToAll.apply(t, self.cp_group, 1, 2) for t in (q, self.widen_kv(k), self.widen_kv(v)))
        o = F.scaled_dot_product_attention(self.rope(q), repeat_kv(self.rope(k), q.shape[1] // k.shape[1]),
                                           repeat_kv(v, q.shape[1] // k.shape[1]), is_causal=True,
                                           scale=self.attention_scale())
        o = WrongDimBack.apply(o, self.cp_group)
        return self.reduce_tp(self.wo(o.transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim)))


class Training(MeshUlyssesTraining):
    block = Stage1Block

    def __init__(self, full, rank, world, pp, tp, cp=1):
        super().__init__(full, rank, world, pp, tp, cp)
        for blk in self.layers:
            blk.stage = self.mesh.stage


def case(world_size: int = 4):
    """4 ranks: the pp2 x cp2 step; 16: the 4-D dp2 x pp2 x tp2 x cp2 step (stage 1: the upper half)."""
    meta = {"source": "Ulysses all_to_all inverse concatenated along the wrong dim, one stage only",
            "bug": "wrong-dim", "bug_node": "cat_9", "bug_op": "aten.cat",
            "bug_ranks": list(range(world_size // 2, world_size)),
            "bug_source": "pipeline_cp_inverse_wrong_dim_stage1.py:28", "bug_stage": 1, "bug_microbatch": 0,
            "bug_line": "torch.cat(recv, dim=3)", "hint": "cat combines elements along dim"}
    name = "pipeline_cp_inverse_wrong_dim_stage1"
    if world_size == 4:
        return pp_cp_case(world_size, model=Training, name=name, meta=meta)
    return fourd_case(world_size, model=Training, name=name, meta=meta)
