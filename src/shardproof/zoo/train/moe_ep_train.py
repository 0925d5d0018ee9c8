"""A mixture-of-experts layer trained with expert parallelism (DeepSpeed-MoE / torchtitan
style) on a dp x ep mesh: 2 microbatches, gradients averaged over the data-parallel world,
AdamW.

The model: a replicated router (a linear layer, softmax over the experts) and E stacked
experts (``w1`` [E, H, F], ``w2`` [E, F, H], GELU); every token goes to every expert and the
outputs are summed weighted by the gate (dense softmax gating -- top-k dispatch would need
data-dependent all_to_all splits, which the collective rules do not model).

Expert parallel: rank = dp_rank * ep + ep_rank; the batch is sharded over all ranks and each
rank owns E/ep experts (``w1``/``w2`` Shard(0) over ep, replicated over dp). The *dispatch*
all_to_all sends every token of the ep group to every expert rank; each rank runs its local
experts on them, and the *combine* all_to_all returns each expert's output to the token's
rank, which weights them by its gate and sums over the experts. Each all_to_all's backward
is the reverse all_to_all.

Gradients, as DeepSpeed averages them: each rank's loss is its tokens' share of the global
mean times the data-parallel world size; the router (replicated everywhere) is all-reduced
over all ranks, the experts over the expert-data-parallel group (the ranks holding the same
experts), and both are divided by the world size (the expert has already summed the
contributions of the whole ep group's tokens through the all_to_all).

    shardproof verify src/shardproof/zoo/train/moe_ep_train.py --world-size 4
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from mini_megatron import MegatronTraining, all_reduce, masked_sq_error, regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train

HIDDEN, FFN, EXPERTS = 8, 12, 4
BATCH, SEQ = 8, 3
MESHES = ((1, 2), (2, 2))  # (dp, ep)
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2, grad_clip=0.5)


class MoE(nn.Module):
    def __init__(self, hidden=HIDDEN, ffn=FFN, experts=EXPERTS):
        super().__init__()
        self.router = nn.Linear(hidden, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, hidden, ffn) / hidden ** 0.5)
        self.w2 = nn.Parameter(torch.randn(experts, ffn, hidden) / ffn ** 0.5)

    def experts(self, tokens):
        """Every local expert on every token: [experts, tokens, hidden]."""
        return F.gelu(tokens.unsqueeze(0) @ self.w1) @ self.w2

    def combine(self, outputs, gate):
        """Sum of the experts' outputs [experts, tokens, hidden] weighted by the gate [tokens, experts]."""
        return (gate.t().unsqueeze(-1) * outputs).sum(0)

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        gate = torch.softmax(self.router(tokens), dim=-1)
        return x + self.combine(self.experts(tokens), gate).view_as(x)


def contiguous_buffer(x):
    """The receive buffer: contiguous whatever x's strides (all_to_all_single writes it as
    if contiguous; ``torch.empty_like`` of a non-contiguous gradient would keep its strides)."""
    return torch.empty(x.shape, dtype=x.dtype)


def _all_to_all(x, group, buffer=contiguous_buffer):
    out = buffer(x)
    dist.all_to_all_single(out, x.contiguous(), group=group)
    return out


class AllToAll(torch.autograd.Function):
    """all_to_all along dim 0 (equal splits); its backward is the reverse all_to_all."""

    @staticmethod
    def forward(ctx, x, group, buffer=contiguous_buffer):
        ctx.group, ctx.buffer = group, buffer
        return _all_to_all(x, group, buffer)

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad, ctx.group, ctx.buffer), None, None


class ExpertParallelMoE(MoE):
    """This rank's experts (a dim-0 chunk of ``w1``/``w2``) and the whole router."""
    recv_buffer = staticmethod(contiguous_buffer)

    def __init__(self, full: MoE, ep_rank: int, ep: int):
        super().__init__(full.router.in_features, full.w1.shape[-1], full.w1.shape[0] // ep)
        self.router = nn.Linear(full.router.in_features, full.router.out_features, bias=False)
        self.ep = ep
        with torch.no_grad():
            self.router.weight.copy_(full.router.weight)
            self.w1.copy_(full.w1.chunk(ep, 0)[ep_rank])
            self.w2.copy_(full.w2.chunk(ep, 0)[ep_rank])

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        gate = torch.softmax(self.router(tokens), dim=-1)
        group_tokens = AllToAll.apply(tokens.repeat(self.ep, 1), self.ep_group, self.recv_buffer)  # dispatch: every ep rank's tokens
        local = self.experts(group_tokens)  # [local experts, ep * tokens, hidden]
        back = torch.cat(local.chunk(self.ep, 1), 0)  # [ep * local experts, tokens, hidden]: by source rank
        outputs = AllToAll.apply(back, self.ep_group, self.recv_buffer)  # combine: [experts, tokens, hidden] for this rank's tokens
        return x + self.combine(outputs, gate).view_as(x)


class TrainExpertParallelMoE(MegatronTraining, ExpertParallelMoE):
    """The mesh's tp axis is the expert-parallel axis; its dp groups are the expert-data-parallel groups."""
    replicated = frozenset({"router.weight"})
    experts_params = frozenset({"w1", "w2"})

    @property
    def ep_group(self):
        return self.mesh.tp_group

    def world_tokens(self, t):
        return all_reduce(t, dist.group.WORLD)

    def global_tokens(self, batch):
        return self.world_tokens(batch["mask"].sum())

    def microbatch_loss(self, mb, total_tokens, train):
        """The rank's share of the mean, times the world size (DeepSpeed averages the gradients)."""
        return masked_sq_error(self(x=mb["x"]), mb) / (total_tokens / self.mesh.world)

    def reduce_group(self, name):
        """The ranks holding pieces of `name`'s gradient: the experts' replicas, or all ranks."""
        return self.mesh.dp_group if name in self.experts_params else dist.group.WORLD

    def grad_divisor(self, name):
        return self.mesh.world

    def reduce_gradients(self, grads):
        return {n: all_reduce(g, self.reduce_group(n)) / self.grad_divisor(n) for n, g in grads.items()}

    def result(self, loss, params, grads, state, train):
        out = super().result(loss, params, grads, state, train)
        return {**out, "loss": self.world_tokens(loss) / self.mesh.world}


def shard_batch(rank, world, inputs):
    return {k: v.chunk(world, 0)[rank] for k, v in inputs.items()}


def case(world_size: int = 4, dp: int = 2, model=TrainExpertParallelMoE, train=TRAIN, name="moe_ep_train",
         meta=None) -> Case:
    torch.manual_seed(0)
    full, ep = MoE(), world_size // dp
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, ep),
                inputs=regression_batch(BATCH, SEQ, HIDDEN), dist_inputs=shard_batch, world_size=world_size,
                train=train, name=name, meta=meta or {"source": "DeepSpeed-MoE / torchtitan expert parallel"})
