"""Layers as opaque calls in a captured training step (issue 16: the step's tail combined
with block contracts). While :func:`opaque_layers` is active, each chosen layer's forward is
one custom op, ``shardproof_blocks::fwd``, and its backward (autograd, above the tracer) one
``shardproof_blocks::bwd``: the step's graph holds one node per layer call instead of the
layer's internals. The ops' meaning is the layer's block contract, which the engine applies
(:mod:`shardproof.ops.block_calls`); their kernels return zeros of the right shapes (the
captured values are never read by the proof; confirmation by execution runs the real step)."""
from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch import nn

SINGLE, RANK = 0, 1


@torch.library.custom_op("shardproof_blocks::fwd", mutates_args=())
def block_fwd(tensors: list[torch.Tensor], key: str, layer: int, side: int, group: list[int]) -> torch.Tensor:
    return torch.zeros_like(tensors[0])


@block_fwd.register_fake
def _(tensors, key, layer, side, group):
    return torch.empty_like(tensors[0])


@torch.library.custom_op("shardproof_blocks::bwd", mutates_args=())
def block_bwd(tensors: list[torch.Tensor], key: str, layer: int, side: int, params: int,
              group: list[int]) -> list[torch.Tensor]:
    return [torch.zeros_like(tensors[0])] + [torch.zeros_like(t) for t in tensors[2:2 + params]]


@block_bwd.register_fake
def _(tensors, key, layer, side, params, group):
    return [torch.empty_like(tensors[0])] + [torch.empty_like(t) for t in tensors[2:2 + params]]


class _Call(torch.autograd.Function):
    @staticmethod
    def forward(ctx, meta, x, *tensors):
        key, layer, side, group, params = meta
        ctx.meta = meta
        ctx.save_for_backward(x, *tensors)
        return block_fwd([x, *tensors], key, layer, side, group)

    @staticmethod
    def backward(ctx, g):
        key, layer, side, group, params = ctx.meta
        x, *tensors = ctx.saved_tensors
        out = block_bwd([x, g.contiguous(), *tensors], key, layer, side, params, group)
        rest = [None] * (len(tensors) - params)
        return (None, out[0], *out[1:], *rest)


def layer_tensors(layer: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """A layer's tensors in call order: its parameters, then its buffers (named as in the
    block contract's program: ``block.<name>``)."""
    return [(f"block.{n}", p) for n, p in layer.named_parameters()] + \
        [(f"block.{n}", b) for n, b in layer.named_buffers()]


def _opaque_forward(layer: nn.Module, key: str, index: int, side: int, group: list[int]):
    params = len(list(layer.parameters()))
    meta = (key, index, side, list(group), params)

    def forward(x):  # the tensors looked up at call time: capture swaps in its graph inputs
        return _Call.apply(meta, x, *[t for _, t in layer_tensors(layer)])
    return forward


def make_opaque(layers: list[nn.Module], keys: list[str], side: int, group_of: Callable[[nn.Module], list[int]]):
    """Make layer i's forward one opaque call (see :func:`opaque_layers`), for good.
    The group is the last argument of both ops, as for every collective."""
    for i, layer in enumerate(layers):
        layer.forward = _opaque_forward(layer, keys[i], i, side, group_of(layer))


@contextlib.contextmanager
def opaque_layers(layers: list[nn.Module], keys: list[str], side: int, group_of: Callable[[nn.Module], list[int]]):
    """Within the context, layer i's forward is one opaque call carrying contract key
    ``keys[i]``, its index, the program side (:data:`SINGLE` or :data:`RANK`) and the global
    ranks of the group its collectives use (``group_of(layer)``)."""
    saved = [layer.__dict__.get("forward") for layer in layers]
    try:
        make_opaque(layers, keys, side, group_of)
        yield
    finally:
        for layer, old in zip(layers, saved):
            if old is None:
                layer.__dict__.pop("forward", None)
            else:
                layer.forward = old


def tp_group_ranks(layer: nn.Module) -> list[int]:
    """The global ranks of a Megatron layer's tensor-parallel group (``layer.mesh.tp_group``)."""
    import torch.distributed as dist
    return list(dist.get_process_group_ranks(layer.mesh.tp_group))
