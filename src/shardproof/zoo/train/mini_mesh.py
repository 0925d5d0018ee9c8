"""Multi-axis training on the mini pipeline framework: a pp x dp x tp x cp mesh of process
groups (cp fastest, then tp, then dp, then the pipeline stage), Megatron
tensor-parallel Llama blocks on each stage (f/g autograd operators over the tp group), optionally
DeepSpeed-Ulysses context parallelism inside attention (all_to_all over the cp group, sequence
<-> heads, with the reverse all_to_all as its backward), all under the 1F1B schedule of
``mini_pipeline.py``. Gradients are all-reduced over the data-parallel group *with* context
parallelism (Megatron's ``get_data_parallel_group(with_context_parallel=True)``): every cp rank
holds a partial gradient of its sequence shard.

Each rank holds its tp shard of every layer (the single-device names, ``layers.{i}.wq.weight``)
and runs its stage's layers; each piece is a method so that a bug example overrides one.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from llama_block import ParallelLlamaBlock, repeat_kv
from mini_megatron import CopyToTensorParallel, ReduceFromTensorParallel, all_reduce
from mini_pipeline import PipelineTraining


class GridMesh:
    """World = pp x dp x tp x cp, rank = ((stage * dp + dp_rank) * tp + tp_rank) * cp + cp_rank:
    the context-parallel ranks adjacent, so that the head shard Ulysses leaves on a rank is the
    nested split of the heads (tp, then cp within the tp shard). Every rank creates every group
    of every axis, in the same order."""

    def __init__(self, rank: int, world: int, pp: int, tp: int, cp: int = 1):
        self.rank, self.pp, self.tp, self.cp = rank, pp, tp, cp
        self.dp = world // (pp * tp * cp)
        self.cp_rank, self.tp_rank = rank % cp, (rank // cp) % tp
        self.dp_rank, self.stage = (rank // (tp * cp)) % self.dp, rank // (tp * cp * self.dp)
        self.tp_group = self._axis_group(world, lambda r: (r // (tp * cp), r % cp))
        self.cp_group = self._axis_group(world, lambda r: (r // cp, None))
        self.dp_group = self._axis_group(world, lambda r: (r // (tp * cp * self.dp), (r // cp) % tp))  # dp x cp
        self.pp_group = self._axis_group(world, lambda r: (r % (tp * cp * self.dp), None))

    def _axis_group(self, world: int, key):
        """The groups of ranks sharing `key(rank)`, all created; this rank's returned."""
        groups = {}
        for r in range(world):
            groups.setdefault(key(r), []).append(r)
        mine = None
        for k, ranks in groups.items():
            group = dist.new_group(ranks)
            if k == key(self.rank):
                mine = group
        return mine

    def rank_of(self, stage: int) -> int:
        return self.rank + (stage - self.stage) * self.tp * self.cp * self.dp


class MeshLlamaBlock(ParallelLlamaBlock):
    """A Megatron tensor-parallel Llama block whose f/g operators run over the mesh's tp group."""

    def __init__(self, full, mesh: GridMesh):
        super().__init__(full, mesh.tp_rank, mesh.tp)
        self.tp_group = mesh.tp_group

    def enter_tp(self, x):
        return CopyToTensorParallel.apply(x, self.tp_group)

    def reduce_tp(self, y):
        return ReduceFromTensorParallel.apply(y, self.tp_group)


def _all_to_all(x, split_dim: int, cat_dim: int, group):
    """Chunk j of `x` along `split_dim` to rank j of `group`; the received chunks concatenated along `cat_dim`."""
    send = [c.contiguous() for c in x.chunk(dist.get_world_size(group), dim=split_dim)]
    recv = [torch.empty_like(c) for c in send]
    dist.all_to_all(recv, send, group=group)
    return torch.cat(recv, dim=cat_dim)


class SeqToHeads(torch.autograd.Function):
    """Ulysses' all_to_all: (B, H, s, D) sequence shard -> (B, H/cp, S, D) head shard; backward the reverse."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _all_to_all(x, 1, 2, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad, 2, 1, ctx.group), None


class HeadsToSeq(torch.autograd.Function):
    """(B, H/cp, S, D) head shard -> (B, H, s, D) sequence shard; backward the reverse."""

    @staticmethod
    def forward(ctx, y, group):
        ctx.group = group
        return _all_to_all(y, 2, 1, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad, 1, 2, ctx.group), None


class UlyssesLlamaBlock(MeshLlamaBlock):
    """The tp block with its attention context-parallel (DeepSpeed-Ulysses): the input is the
    rank's sequence shard; q/k/v trade the sequence shard for a head shard (the rank's KV heads
    must split over cp as its query heads do: each cp rank keeps its query heads' KV heads),
    RoPE and causal (grouped-query) attention run over the whole sequence, and the output
    trades back."""

    def __init__(self, full, mesh: GridMesh):
        super().__init__(full, mesh)
        self.cp_group = mesh.cp_group

    def attention(self, x):
        b, s, _ = x.shape
        x = self.enter_attention(x)
        q = self.wq(x).view(b, s, self.local_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.local_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.local_kv_heads, self.head_dim).transpose(1, 2)
        q, k, v = (SeqToHeads.apply(t, self.cp_group) for t in (q, k, v))
        n_rep = self.local_heads // self.local_kv_heads
        o = F.scaled_dot_product_attention(self.rope(q), repeat_kv(self.rope(k), n_rep), repeat_kv(v, n_rep),
                                           is_causal=True, scale=self.attention_scale())
        o = HeadsToSeq.apply(o, self.cp_group)
        return self.reduce_tp(self.wo(o.transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim)))


class MeshPipelineTraining(PipelineTraining):
    """One rank of a pp x dp x cp x tp training step over `full` (a ``mini_pipeline.Stack`` of
    Llama blocks): its tp shard of every block, its stage's blocks run under 1F1B."""

    block = MeshLlamaBlock

    def __init__(self, full, rank: int, world: int, pp: int, tp: int, cp: int = 1):
        nn.Module.__init__(self)  # PipelineTraining's own mesh is pp x dp only
        self.mesh = GridMesh(rank, world, pp, tp, cp)
        self.layers = nn.ModuleList(self.block(b, self.mesh) for b in full.layers)
        self.first, self.last = self.mesh.stage == 0, self.mesh.stage == pp - 1


class MeshUlyssesTraining(MeshPipelineTraining):
    block = UlyssesLlamaBlock


def mesh_inputs(pp: int, tp: int, cp: int = 1):
    """``dist_inputs``: rank r takes the batch chunk of its dp rank and the sequence chunk of its
    cp rank (every stage and tp rank of a replica sees the same data)."""
    def shard(rank, world, inputs):
        dp = world // (pp * tp * cp)
        dp_rank, cp_rank = (rank // (tp * cp)) % dp, rank % cp
        return {k: v.chunk(dp, 0)[dp_rank].chunk(cp, 1)[cp_rank] for k, v in inputs.items()}
    return shard
