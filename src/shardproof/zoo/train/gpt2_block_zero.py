"""ZeRO-1, ZeRO-2 and ZeRO-3 (FSDP-style) training steps of the GPT-2 block (a single-device
model, data parallel over every rank), with 2 microbatches, global-norm clipping and AdamW.
Each parameter's optimizer state is sharded along dim 0 over a *shard group*; with a
replicate x shard mesh (HSDP) the shards are replicated over the other axis.

- ZeRO-1: gradients all-reduced; each rank updates its dim-0 chunk of every parameter with
  its chunk of the state, then all-gathers the updated parameter (replicated again).
- ZeRO-2: gradients reduce-scattered over the shard group (all-reduced over the replicate
  group): each rank holds its gradient chunk only, updates that chunk, all-gathers.
- ZeRO-3: the parameters themselves are dim-0 chunks (FSDP2's per-parameter Shard(0)),
  all-gathered before use in forward; the gather's backward reduce-scatters the gradient.

    shardproof verify src/shardproof/zoo/train/gpt2_block_zero.py --world-size 4
"""
import torch
import torch.distributed as dist
from torch.nn.utils.stateless import _reparametrize_module

from gpt2_block import GPT2Block
from gpt2_block_train import BATCH, SEQ, SMALL_HEADS, SMALL_HIDDEN, TRAIN
from mini_megatron import MegatronTraining, _all_gather_seq, _reduce_scatter_seq, all_reduce, regression_batch
from shardproof import Case

MESHES = ((4, 1),)  # (dp, tp): ZeRO over all ranks
STAGES = (1, 2, 3)


class ZeroMesh:
    """Replicate x shard: rank = replica * shard_size + shard_rank; the optimizer state (and
    for ZeRO-2/3 gradients, for ZeRO-3 parameters) is split over the shard group."""

    def __init__(self, rank: int, world: int, shard_size: int):
        self.rank, self.world, self.shard_size = rank, world, shard_size
        self.shard_rank, self.replica = rank % shard_size, rank // shard_size
        replicas = world // shard_size
        shard_groups = [dist.new_group(list(range(r * shard_size, (r + 1) * shard_size))) for r in range(replicas)]
        replicate_groups = [dist.new_group(list(range(s, world, shard_size))) for s in range(shard_size)]
        self.shard_group, self.replicate_group = shard_groups[self.replica], replicate_groups[self.shard_rank]
        self.dp_group = dist.group.WORLD  # the data-parallel group: every rank


class GatherParameter(torch.autograd.Function):
    """FSDP's unshard: all_gather a dim-0 parameter chunk (forward), reduce_scatter its
    gradient (backward)."""

    @staticmethod
    def forward(ctx, shard, group):
        ctx.group = group
        return _all_gather_seq(shard, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_seq(grad, ctx.group), None


class ZeroTraining(MegatronTraining):
    """The data-parallel training step with the optimizer state sharded (ZeRO stage 1/2/3)."""
    stage = 1

    def chunk(self, t):
        return t.chunk(self.mesh.shard_size, 0)[self.mesh.shard_rank]

    def reduce_gradients(self, grads):
        if self.stage == 1:
            return {n: all_reduce(g, self.mesh.dp_group) for n, g in grads.items()}
        if self.stage == 2:
            grads = {n: self.reduce_scatter(g) for n, g in grads.items()}
        return {n: all_reduce(g, self.mesh.replicate_group) for n, g in grads.items()}  # stage 3: scattered already

    def reduce_scatter(self, g):
        return _reduce_scatter_seq(g, self.mesh.shard_group)

    def grad_norm(self, grads):
        """Stage 1: every rank holds the whole gradients; 2 and 3: chunks, summed over the shard group."""
        sq = sum((g * g).sum() for g in grads.values())
        return torch.sqrt(sq if self.stage == 1 else all_reduce(sq, self.mesh.shard_group))

    def update(self, params, grads, state, train):
        updated = {}
        for n, p in params.items():
            if self.stage == 3:  # parameters, gradients and state are all chunks already
                updated[n] = super().update({n: p}, {n: grads[n]}, {n: state[n]}, train)[n]
                continue
            g = self.chunk(grads[n]) if self.stage == 1 else grads[n]
            chunk_state = {s: self.chunk(v) for s, v in state[n].items()}
            new = super().update({n: self.chunk(p)}, {n: g}, {n: chunk_state}, train)[n]
            updated[n] = _all_gather_seq(new, self.mesh.shard_group)
        return updated


class ZeroGPT2Block(ZeroTraining, GPT2Block):
    def __init__(self, full: GPT2Block, rank: int, world: int, stage: int, shard_size: int):
        GPT2Block.__init__(self, full.hidden, full.heads, full.c_fc.out_features)  # not the tp mesh: ZeroMesh
        self.load_state_dict(full.state_dict())
        self.mesh, self.stage = ZeroMesh(rank, world, shard_size), stage
        if stage == 3:
            with torch.no_grad():
                for p in self.parameters():
                    p.data = self.chunk(p.data).clone()

    def forward(self, x):
        if self.stage != 3:
            return super().forward(x)
        whole = {n: GatherParameter.apply(p, self.mesh.shard_group) for n, p in self.named_parameters()}
        with _reparametrize_module(self, whole):
            return super().forward(x)


def data_shard(rank, world, inputs):
    return {k: v.chunk(world, 0)[rank] for k, v in inputs.items()}


def case(world_size: int = 4, dp: int = 4, stage: int = 3, shard_size: int | None = None, model=ZeroGPT2Block,
         name=None, meta=None) -> Case:
    """ZeRO `stage` over all `world_size` ranks (the shard group: `shard_size` ranks, default all)."""
    torch.manual_seed(0)
    full = GPT2Block(SMALL_HIDDEN, SMALL_HEADS, 4 * SMALL_HIDDEN)
    shard = shard_size or world_size
    chunks = "Shard(0)" if shard == world_size else f"Mesh([{world_size // shard}, {shard}], (Replicate(), Shard(0)))"
    expect = {"grad:*": chunks} if stage == 2 else None  # ZeRO-2 returns each rank's gradient chunk
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, stage, shard),
                inputs=regression_batch(BATCH, SEQ, SMALL_HIDDEN),
                dist_inputs=data_shard, world_size=world_size, train=TRAIN, expect=expect,
                name=name or f"gpt2_block_zero{stage}", meta=meta or {"source": "ZeRO-1/2/3 (DeepSpeed), HSDP"})
