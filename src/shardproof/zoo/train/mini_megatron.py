"""A small Megatron-style training framework for the training examples: a dp x tp mesh of
process groups, the f/g operators as custom autograd functions, and a training step
(microbatches with gradient accumulation, loss normalised by the global token count,
gradient all_reduce over dp, global-norm clipping, loss scaling, the optimizer update).

Each piece of the step is a method, so that the bug examples can override exactly one.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the zoo models

from shardproof.frontends.torch_train import (clip_coefficient, microbatch_position, optimizer_update,  # noqa: E402
                                             split_microbatches)


class Mesh:
    """World = dp x tp, rank = dp_rank * tp + tp_rank; every rank creates every group in
    the same order (as torch.distributed requires)."""

    def __init__(self, rank: int, world: int, tp: int):
        self.rank, self.world, self.tp, self.dp = rank, world, tp, world // tp
        self.tp_rank, self.dp_rank = rank % tp, rank // tp
        tp_groups = [dist.new_group(list(range(d * tp, (d + 1) * tp))) for d in range(self.dp)]
        dp_groups = [dist.new_group(list(range(t, world, tp))) for t in range(tp)]
        self.tp_group, self.dp_group = tp_groups[self.dp_rank], dp_groups[self.tp_rank]


def all_reduce(t, group, op=dist.ReduceOp.SUM):
    t = t.clone()
    dist.all_reduce(t, op=op, group=group)
    return t


class CopyToTensorParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all_reduce of the gradient over tp in backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad, ctx.group), None


class ReduceFromTensorParallel(torch.autograd.Function):
    """Megatron's g: all_reduce over tp forward, identity backward."""

    @staticmethod
    def forward(ctx, y, group):
        return all_reduce(y, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _all_gather_seq(x, group):
    n = dist.get_world_size(group)
    out = torch.empty((x.shape[0] * n,) + tuple(x.shape[1:]), dtype=x.dtype)
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


def _reduce_scatter_seq(y, group):
    n = dist.get_world_size(group)
    out = torch.empty((y.shape[0] // n,) + tuple(y.shape[1:]), dtype=y.dtype)
    dist.reduce_scatter_tensor(out, y.contiguous(), group=group)
    return out


class GatherFromSequenceParallel(torch.autograd.Function):
    """Megatron's all_gather along the sequence (forward), reduce_scatter (backward)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _all_gather_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_seq(grad, ctx.group), None


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    """Megatron's reduce_scatter along the sequence (forward), all_gather (backward)."""

    @staticmethod
    def forward(ctx, y, group):
        ctx.group = group
        return _reduce_scatter_seq(y, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_seq(grad, ctx.group), None


def dp_shard(tp: int):
    """``dist_inputs`` for a dp x tp mesh: rank r takes the (r // tp)-th chunk of the batch."""
    def shard(rank, world, inputs):
        return {k: v.chunk(world // tp, 0)[rank // tp] for k, v in inputs.items()}
    return shard


def masked_sq_error(out, batch):
    """Per-token loss: half the squared error summed over the hidden dim, kept where the mask is set."""
    return (batch["mask"] * (0.5 * (out - batch["target"]) ** 2).sum(-1)).sum()


def token_mean_loss(outputs, batch):
    """The reference loss: masked squared error averaged over the batch's token count."""
    return masked_sq_error(outputs, batch) / batch["mask"].sum()


def regression_batch(batch: int, seq: int, hidden: int) -> dict:
    """Inputs, regression targets and a token mask for the training cases."""
    return {"x": torch.randn(batch, seq, hidden), "target": torch.randn(batch, seq, hidden),
            "mask": (torch.rand(batch, seq) > 0.3).long()}


class MegatronTraining:
    """Mixin for a tensor-parallel module (``enter_tp``/``reduce_tp`` hooks): Megatron's f/g
    operators and its training step. Placed before the module class, it builds the rank's
    place on the dp x tp mesh (``self.mesh``) and the module as its tp rank's shard."""

    def __init__(self, full, rank: int, world: int, tp: int):
        mesh = Mesh(rank, world, tp)
        super().__init__(full, mesh.tp_rank, tp)
        self.mesh = mesh

    def enter_tp(self, x):
        return CopyToTensorParallel.apply(x, self.mesh.tp_group)

    def reduce_tp(self, y):
        return ReduceFromTensorParallel.apply(y, self.mesh.tp_group)

    replicated: frozenset = frozenset()
    """Names of the parameters every tp rank holds whole (layer norms, row-parallel biases)."""
    sequence_parallel: frozenset = frozenset()
    """Replicated parameters applied to each rank's sequence shard: their gradients are
    partial sums over tp (Megatron all-reduces them before the optimizer)."""
    microbatch_dim: int = 0

    # ---- the step, piece by piece

    def global_tokens(self, batch):
        """The token count of the whole (global) batch: all microbatches, all dp ranks."""
        return all_reduce(batch["mask"].sum(), self.mesh.dp_group)

    def microbatch_loss(self, mb, total_tokens, train):
        return masked_sq_error(self(x=mb["x"]), mb) / total_tokens

    def accumulate(self, grads, new, train):
        return {n: g if n not in grads else grads[n] + g for n, g in new.items()}

    def reduce_gradients(self, grads):
        grads = {n: all_reduce(g, self.mesh.tp_group) if n in self.sequence_parallel else g for n, g in grads.items()}
        return {n: all_reduce(g, self.mesh.dp_group) for n, g in grads.items()}

    def grad_norm(self, grads):
        """Global L2 norm: tp-sharded gradients summed over tp, replicated ones counted once."""
        sq = sum((g * g).sum() for n, g in grads.items() if n not in self.replicated)
        if self.mesh.tp_rank == 0:
            sq = sq + sum((g * g).sum() for n, g in grads.items() if n in self.replicated)
        return torch.sqrt(all_reduce(sq, self.mesh.tp_group))

    def update(self, params, grads, state, train):
        return {n: optimizer_update(params[n], grads[n], state[n], train.optimizer) for n in params}

    def accumulate_gradients(self, params, inputs, train):
        """Forward and backward over the microbatches: (the loss, the summed gradients)."""
        total_tokens = self.global_tokens(inputs)
        grads, loss = {}, 0
        for index, mb in enumerate(split_microbatches(inputs, train.microbatches, self.microbatch_dim)):
            with microbatch_position(index):  # marks the nodes: a finding names its microbatch
                mb_loss = self.microbatch_loss(mb, total_tokens, train)
                scaled = mb_loss * train.loss_scale if train.loss_scale else mb_loss
                new = torch.autograd.grad(scaled, list(params.values()))
                grads = self.accumulate(grads, dict(zip(params, new)), train)
                loss = loss + mb_loss.detach()
        if train.loss_scale:
            grads = {n: g / train.loss_scale for n, g in grads.items()}
        return loss, grads

    def clip(self, grads, train):
        if train.grad_clip is None:
            return grads
        coef = clip_coefficient(self.grad_norm(grads), train.grad_clip)
        return {n: g * coef for n, g in grads.items()}

    def result(self, loss, params, grads, state, train):
        out = {"loss": all_reduce(loss, self.mesh.dp_group), "grads": grads}
        if train.optimizer is not None:
            out["updated"] = self.update(params, grads, state, train)
        return out

    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        loss, grads = self.accumulate_gradients(params, inputs, train)
        grads = self.clip(self.reduce_gradients(grads), train)
        return self.result(loss, params, grads, state, train)
