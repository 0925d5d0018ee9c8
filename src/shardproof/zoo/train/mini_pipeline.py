"""A small Megatron-style pipeline-parallel training framework for the pipeline examples:
a pp x dp mesh (rank = stage * dp + dp_rank), a stack of blocks cut into contiguous
stages, the 1F1B schedule with its P2P exchanges as ``batch_isend_irecv`` batches (as
Megatron's ``p2p_communication`` issues them), microbatch gradient accumulation, the loss
normalised by the global token count, gradients all-reduced over dp.

Every rank holds the whole model's parameters (the graph inputs are the same names on every
rank) and runs only its stage's blocks. At the end of the step each stage's gradients (and
the last stage's loss) are broadcast over the pipeline group, so that every rank returns
the whole step; a broken gradient is still first broken on its stage's rank.
Each piece is a method, so that the bug examples override exactly one.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the zoo models

from mini_megatron import all_reduce, masked_sq_error, regression_batch, token_mean_loss  # noqa: E402,F401
from shardproof.frontends.torch_p2p import pipeline_position  # noqa: E402
from shardproof.frontends.torch_train import split_microbatches  # noqa: E402


class Stack(nn.Module):
    """The whole model: blocks applied in order (the single-device reference)."""

    def __init__(self, blocks):
        super().__init__()
        self.layers = nn.ModuleList(blocks)

    def forward(self, x):
        for block in self.layers:
            x = block(x)
        return x


def mlp_block(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())


class PipeMesh:
    """World = pp x dp, rank = stage * dp + dp_rank; every rank makes every group in order."""

    def __init__(self, rank: int, world: int, pp: int):
        self.rank, self.pp, self.dp = rank, pp, world // pp
        self.stage, self.dp_rank = rank // self.dp, rank % self.dp
        dp_groups = [dist.new_group([s * self.dp + d for d in range(self.dp)]) for s in range(pp)]
        pp_groups = [dist.new_group([s * self.dp + d for s in range(pp)]) for d in range(self.dp)]
        self.dp_group, self.pp_group = dp_groups[self.stage], pp_groups[self.dp_rank]

    def rank_of(self, stage: int) -> int:
        return stage * self.dp + self.dp_rank


class PipelineTraining(nn.Module):
    """One rank of a pipeline-parallel training step over `full` (a :class:`Stack`)."""

    def __init__(self, full: Stack, rank: int, world: int, pp: int):
        super().__init__()
        self.layers = full.layers  # the whole model's parameters, by their single-device names
        self.mesh = PipeMesh(rank, world, pp)
        self.first, self.last = self.mesh.stage == 0, self.mesh.stage == pp - 1

    # ---- the stage and its peers

    def stage_layers(self, stage: int) -> list[int]:
        """The blocks stage `stage` runs: contiguous, in order."""
        per = len(self.layers) // self.mesh.pp
        return list(range(stage * per, (stage + 1) * per))

    def next_rank(self) -> int:
        return self.mesh.rank_of(self.mesh.stage + 1)

    def prev_rank(self) -> int:
        return self.mesh.rank_of(self.mesh.stage - 1)

    def stage_forward(self, x):
        for i in self.stage_layers(self.mesh.stage):
            x = self.layers[i](x)
        return x

    # ---- P2P, Megatron's p2p_communication: one batch_isend_irecv per exchange

    def exchange(self, send_next=None, send_prev=None, recv_next=None, recv_prev=None, buffers=None):
        """Send/receive with the neighbouring stages in one batch; the receive buffers (fresh, or `buffers`)."""
        ops, bufs = [], dict(buffers or {})
        if send_prev is not None:
            ops.append(dist.P2POp(dist.isend, send_prev.contiguous(), self.grad_prev_rank()))
        if recv_prev is not None:
            bufs.setdefault("prev", torch.empty(recv_prev))
            ops.append(dist.P2POp(dist.irecv, bufs["prev"], self.prev_rank()))
        if send_next is not None:
            ops.append(dist.P2POp(dist.isend, send_next.contiguous(), self.next_rank()))
        if recv_next is not None:
            bufs.setdefault("next", torch.empty(recv_next))
            ops.append(dist.P2POp(dist.irecv, bufs["next"], self.grad_next_rank()))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return bufs

    def recv_forward(self, shape):
        return None if self.first else self.exchange(recv_prev=shape)["prev"]

    def send_forward(self, out):
        if not self.last:
            self.exchange(send_next=out.detach())

    def recv_backward(self, shape):
        return None if self.last else self.exchange(recv_next=shape)["next"]

    def send_backward(self, grad):
        if not self.first:
            self.exchange(send_prev=grad)

    def send_forward_recv_backward(self, out, shape):
        return None if self.last else self.exchange(send_next=out.detach(), recv_next=shape)["next"]

    def send_backward_recv_forward(self, grad, shape):
        if self.first:
            return None
        return self.exchange(send_prev=grad, recv_prev=shape)["prev"]

    def grad_prev_rank(self) -> int:
        """Where this stage's input gradient goes (backward): the previous stage's rank."""
        return self.prev_rank()

    def grad_next_rank(self) -> int:
        """Where this stage's output gradient comes from (backward): the next stage's rank."""
        return self.next_rank()

    # ---- one microbatch forward / backward

    def forward_step(self, i, x, total_tokens):
        """The stage's output for microbatch i (its loss on the last stage), its input saved."""
        x = self.microbatches[i]["x"] if self.first else x.requires_grad_(True)
        out = self.stage_forward(x)
        if self.last:
            out = masked_sq_error(out, self.targets(i)) / total_tokens
        self.saved.append((i, x, out))
        return out

    def backward_step(self, grad, params):
        """The oldest saved microbatch's backward: its input's gradient (to send back) and
        the stage's parameter gradients, accumulated."""
        i, x, out = self.pop_saved(self.saved)
        wrt = list(params.values()) + ([] if self.first else [x])
        with pipeline_position(self.mesh.stage, i):
            got = torch.autograd.grad(out, wrt, grad_outputs=grad, allow_unused=True)
        self.grads = self.accumulate(self.grads, dict(zip(params, got[:len(params)])))
        return None if self.first else got[-1]

    def targets(self, i):
        return self.microbatches[i]

    def pop_saved(self, saved):
        """The oldest saved microbatch (1F1B runs backwards in forward order; Megatron's
        ``input_tensors.pop(0)``)."""
        return saved.pop(0)

    def accumulate(self, grads, new):
        return {n: g if n not in grads else grads[n] + g for n, g in new.items()}

    def all_reduce_tokens(self, inputs):
        """The global token count (the loss's normaliser): the dp replicas' masks summed."""
        return all_reduce(inputs["mask"].sum(), self.mesh.dp_group)

    def reduce_gradients(self, grads):
        return {n: all_reduce(g, self.mesh.dp_group) for n, g in grads.items()}

    # ---- the 1F1B schedule (Megatron's forward_backward_pipelining_without_interleaving)

    def run_schedule(self, params, inputs, train):
        self.microbatches = split_microbatches(inputs, train.microbatches)
        self.saved, self.grads = [], {}
        total_tokens = self.all_reduce_tokens(inputs)
        shape, m, stage = tuple(self.microbatches[0]["x"].shape), train.microbatches, self.mesh.stage
        warmup = min(self.mesh.pp - stage - 1, m)
        losses = []
        for i in range(warmup):
            with pipeline_position(stage, i):
                out = self.forward_step(i, self.recv_forward(shape), total_tokens)
                self.send_forward(out)
        with pipeline_position(stage, warmup):
            x = self.recv_forward(shape) if m > warmup else None
        for k in range(m - warmup):
            i = warmup + k
            with pipeline_position(stage, i):
                out = self.forward_step(i, x, total_tokens)
                losses.append(out)
                grad = self.send_forward_recv_backward(out, shape)
            input_grad = self.backward_step(grad, params)
            with pipeline_position(stage, k):
                if k == m - warmup - 1:
                    self.send_backward(input_grad)
                else:
                    x = self.send_backward_recv_forward(input_grad, shape)
        for k in range(m - warmup, m):
            with pipeline_position(stage, k):
                input_grad = self.backward_step(self.recv_backward(shape), params)
                self.send_backward(input_grad)
        loss = sum(o.detach() for o in losses) if self.last else torch.zeros(())
        return loss, self.reduce_gradients(self.grads)

    def owned_layers(self, stage: int) -> list[int]:
        """The blocks whose parameters stage `stage`'s ranks own (their gradients come from there)."""
        return self.stage_layers(stage)

    def stage_params(self) -> dict:
        owned = {f"layers.{i}." for i in self.owned_layers(self.mesh.stage)}
        return {n: p for n, p in self.named_parameters() if any(n.startswith(o) for o in owned)}

    def publish(self, loss, grads):
        """Every stage's gradients and the loss, broadcast from their stage over the pipeline group."""
        out = {}
        for stage in range(self.mesh.pp):
            src = self.mesh.rank_of(stage)
            for n in [n for n, _ in self.named_parameters() if int(n.split(".")[1]) in self.owned_layers(stage)]:
                g = grads[n].clone() if stage == self.mesh.stage else torch.zeros_like(dict(self.named_parameters())[n])
                dist.broadcast(g, src=src, group=self.mesh.pp_group)
                out[n] = g
        loss = all_reduce(loss, self.mesh.dp_group)
        dist.broadcast(loss, src=self.mesh.rank_of(self.mesh.pp - 1), group=self.mesh.pp_group)
        return loss, out

    def train_step(self, inputs, state, train):
        loss, grads = self.run_schedule(self.stage_params(), inputs, train)
        loss, grads = self.publish(loss, grads)
        return {"loss": loss, "grads": grads}


def pipeline_inputs(pp: int):
    """``dist_inputs``: every rank of dp replica d takes the d-th chunk of the batch."""
    def shard(rank, world, inputs):
        dp = world // pp
        return {k: v.chunk(dp, 0)[rank % dp] for k, v in inputs.items()}
    return shard
