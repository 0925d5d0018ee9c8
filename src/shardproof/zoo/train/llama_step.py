"""The benchmark's Llama training step (bench/llama_stack.py: N zoo Llama blocks on a dp x tp
Megatron mesh, M microbatches, AdamW, global-norm clipping) with one layer optionally
changed, for the step-level block contracts (shardproof.step_blocks, issue 16).

Bugs (layer `buggy_layer` only):
- ``no-grad-reduce``: its input gradient is never all-reduced over tp (Megatron's f operator
  with an identity backward): every layer below it gets a partial-sum gradient.
- ``no-dp-reduce`` (in the step's tail, not in the layer): that layer's parameter gradients
  are never all-reduced over dp (each dp replica updates with its own batch's gradient).
- ``lr`` / ``weight-decay`` (tail): that layer's parameters are updated with twice the
  learning rate / another weight decay than the step's optimizer.
- ``no-clip`` (tail): that layer's ``wq`` gradient is left out of the clipping (not scaled by
  the clipping coefficient; the norm still counts it).
- ``state-init`` (tail): that layer's AdamW first moment is re-initialised to zeros inside the
  step (as an optimizer that lazily creates the state of one parameter group would), instead of
  the state the step was given.
- ``wrong-layer``: that layer's rank shards are cut from the layer below's weights (an
  off-by-one when building the rank model: ``full.layers[i - 1]``).
- ``dp-rank-loss`` (`buggy_layer` names a dp rank here): that dp rank scales its microbatch
  losses by 1.5 (a rank-specific constant: only that dp replica's gradient contribution is wrong).
Not a zoo case itself: tests/cases/step_llama*.py are."""
import os
import sys
from dataclasses import replace

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the zoo models

from llama_layers import HIDDEN, Stack, TPLayer, full_layers  # noqa: E402
from mini_megatron import Mesh, MegatronTraining, dp_shard, regression_batch, token_mean_loss  # noqa: E402
from shardproof import AdamW, Case, Train  # noqa: E402

SEQ, MB_ROWS = 4, 2
PARAMS = ("attention_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w3", "w2")  # each layer's, in order


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class NoInputGradReduce(TPLayer):
    """The bug: f's backward all_reduce is missing (the input gradient stays partial over tp)."""

    def enter_tp(self, x):
        return _Identity.apply(x)


BUGS = {"no-grad-reduce": NoInputGradReduce}


class ParallelLlamaStep(MegatronTraining, nn.Module):
    def __init__(self, full, rank, world, tp, buggy_layer=None, bug="no-grad-reduce"):
        nn.Module.__init__(self)
        self.mesh = Mesh(rank, world, tp)
        self.buggy_layer, self.bug = buggy_layer, bug
        blocks = list(full.layers)
        if bug == "wrong-layer":
            blocks[buggy_layer] = blocks[buggy_layer - 1]
        self.layers = nn.ModuleList((BUGS.get(bug, TPLayer) if i == buggy_layer else TPLayer)(block, self.mesh)
                                    for i, block in enumerate(blocks))
        self.replicated = frozenset(f"layers.{i}.{norm}.weight" for i in range(len(full.layers))
                                    for norm in ("attention_norm", "ffn_norm"))

    def microbatch_loss(self, mb, total_tokens, train):
        loss = super().microbatch_loss(mb, total_tokens, train)
        if self.bug == "dp-rank-loss" and self.mesh.dp_rank == self.buggy_layer:  # buggy_layer: here a dp rank
            loss = loss * 1.5
        return loss

    def reduce_gradients(self, grads):
        if self.bug != "no-dp-reduce":
            return super().reduce_gradients(grads)
        skip = f"layers.{self.buggy_layer}."
        reduced = super().reduce_gradients({n: g for n, g in grads.items() if not n.startswith(skip)})
        return {n: reduced.get(n, g) for n, g in grads.items()}

    def update(self, params, grads, state, train):
        if self.bug == "state-init":
            mine = f"layers.{self.buggy_layer}."
            state = {n: dict(s, exp_avg=torch.zeros_like(s["exp_avg"])) if n.startswith(mine) else s
                     for n, s in state.items()}
        other = {"lr": {"lr": 2 * train.optimizer.lr}, "weight-decay": {"weight_decay": 0.5}}.get(self.bug)
        if other is None:
            return super().update(params, grads, state, train)
        mine = f"layers.{self.buggy_layer}."
        changed = replace(train, optimizer=replace(train.optimizer, **other))
        return {n: super(ParallelLlamaStep, self).update({n: p}, grads, state, changed if n.startswith(mine) else train)[n]
                for n, p in params.items()}

    def clip(self, grads, train):
        clipped = super().clip(grads, train)
        if self.bug == "no-clip":
            skip = f"layers.{self.buggy_layer}.wq.weight"
            clipped[skip] = grads[skip]
        return clipped

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def step_case(n_layers=8, dp=2, tp=2, microbatches=2, buggy_layer=None, bug="no-grad-reduce", seed=0,
              shapes=None) -> Case:
    """`shapes`: the blocks' hidden, heads, kv_heads, ffn (llama_layers' toy widths by default)."""
    torch.manual_seed(seed)
    shapes = shapes or {}
    full = Stack(full_layers(n_layers, **shapes))
    train = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=microbatches, grad_clip=0.5)
    return Case(single=full, distributed=lambda rank, world: ParallelLlamaStep(full, rank, world, tp, buggy_layer, bug),
                inputs=regression_batch(dp * microbatches * MB_ROWS, SEQ, shapes.get("hidden", HIDDEN)),
                dist_inputs=dp_shard(tp),
                world_size=dp * tp, train=train,
                name=f"llama_step_N{n_layers}_dp{dp}_tp{tp}_M{microbatches}" +
                     (f"_{bug}{buggy_layer}" if buggy_layer is not None else ""),
                meta={"source": "zoo: Llama training step from the zoo's blocks"})
