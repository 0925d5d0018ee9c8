"""Multi-axis training on the mini pipeline framework: a pp x dp x tp x cp mesh of process
groups (cp fastest, then tp, then dp, then the pipeline stage), Megatron
tensor-parallel Llama blocks on each stage (f/g autograd operators over the tp group), optionally
DeepSpeed-Ulysses context parallelism inside attention (all_to_all over the cp group, sequence
<-> heads, with the reverse all_to_all as its backward), all under the 1F1B schedule of
``mini_pipeline.py``. Gradients, the loss and the token count are summed over the context-parallel
group, then over the data-parallel group (each cp rank holds a partial sum of its sequence shard;
Megatron sums over its dp x cp group in one all_reduce, which shardproof cannot relate yet: an
all_reduce over a group holding a piece on two dims comes back unknown).

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
        self.dp_group = self._axis_group(world, lambda r: (r // (tp * cp * self.dp), r % (tp * cp)))
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


class AllToAll(torch.autograd.Function):
    """Ulysses' all_to_all (``_all_to_all``) with the reverse exchange as its backward:
    ``(x, group, 1, 2)`` trades a (B, H, s, D) sequence shard for a (B, H/cp, S, D) head shard,
    ``(y, group, 2, 1)`` trades back."""

    @staticmethod
    def forward(ctx, x, group, split_dim: int, cat_dim: int):
        ctx.group, ctx.dims = group, (split_dim, cat_dim)
        return _all_to_all(x, split_dim, cat_dim, group)

    @staticmethod
    def backward(ctx, grad):
        split_dim, cat_dim = ctx.dims
        return _all_to_all(grad, cat_dim, split_dim, ctx.group), None, None, None


class UlyssesLlamaBlock(MeshLlamaBlock):
    """The tp block with its attention context-parallel (DeepSpeed-Ulysses): the input is the
    rank's sequence shard; q/k/v trade the sequence shard for a head shard (the rank's KV heads
    split over cp as its query heads do, each cp rank keeping its query heads' KV heads; fewer KV
    heads than cp ranks are repeated per group first, ``widen_kv``),
    RoPE and causal (grouped-query) attention run over the whole sequence, and the output
    trades back."""

    def __init__(self, full, mesh: GridMesh):
        super().__init__(full, mesh)
        self.cp_group = mesh.cp_group

    def widen_kv(self, t):
        """Fewer KV heads than cp ranks: each repeated (per group, as ``repeat_kv``) before the
        split, so that every rank receives the replica its query heads share."""
        cp = dist.get_world_size(self.cp_group)
        return t if t.shape[1] % cp == 0 else repeat_kv(t, cp // t.shape[1])

    def attention(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x)
        q, k, v = (AllToAll.apply(t, self.cp_group, 1, 2) for t in (q, self.widen_kv(k), self.widen_kv(v)))
        n_rep = q.shape[1] // k.shape[1]
        o = F.scaled_dot_product_attention(self.rope(q), repeat_kv(self.rope(k), n_rep), repeat_kv(v, n_rep),
                                           is_causal=True, scale=self.attention_scale())
        o = AllToAll.apply(o, self.cp_group, 2, 1)
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


    def over_cp(self, t):
        """`t` summed over the context-parallel group (each cp rank's share is its sequence shard's)."""
        return all_reduce(t, self.mesh.cp_group) if self.mesh.cp > 1 else t

    def all_reduce_tokens(self, inputs):
        return all_reduce(self.over_cp(inputs["mask"].sum()), self.mesh.dp_group)

    def reduce_gradients(self, grads):
        return super().reduce_gradients({n: self.over_cp(g) for n, g in grads.items()})

    def publish(self, loss, grads):
        return super().publish(self.over_cp(loss), grads)


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
