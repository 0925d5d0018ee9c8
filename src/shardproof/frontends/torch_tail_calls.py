"""The per-parameter optimizer update as one opaque call in a captured training step (issue 16:
the step's tail sub-linear in the layers). While :func:`opaque_updates` is active, every call of
:func:`shardproof.frontends.torch_train.optimizer_update` -- the single-device reference step's
and every rank's (the zoo's Megatron step calls it per parameter) -- is one custom op,
``shardproof_tail::update(param, grad, states, key)``, instead of the ~13 elementwise ops of
AdamW. ``key`` names the optimizer and all its hyperparameters (:func:`optimizer_key`), so a
parameter updated with another learning rate or weight decay is another call. The op computes
the real update (its kernel is the function itself), and its meaning in the proof is a class
contract proved once per (hyperparameters, shape, dtype, layout) by
:mod:`shardproof.step_tail`; the rule is :mod:`shardproof.ops.tail_calls`."""
from __future__ import annotations

import contextlib

import torch

OPTIMIZERS: dict[str, object] = {}
"""optimizer key -> the optimizer (SGD / AdamW dataclass) the key names."""


def optimizer_key(optimizer) -> str:
    """The optimizer's type and every hyperparameter, as text (equal keys: equal updates)."""
    key = repr(optimizer)
    OPTIMIZERS[key] = optimizer
    return key


@torch.library.custom_op("shardproof_tail::update", mutates_args=())
def tail_update(param: torch.Tensor, grad: torch.Tensor, states: list[torch.Tensor], key: str) -> torch.Tensor:
    from .torch_train import plain_update
    optimizer = OPTIMIZERS[key]
    return plain_update(param, grad, dict(zip(optimizer.state_names, states)), optimizer)


@tail_update.register_fake
def _(param, grad, states, key):
    return torch.empty_like(param)


def _opaque(param, grad, state, optimizer):
    from .torch_train import plain_update
    names = getattr(optimizer, "state_names", None)
    tensors = [param, grad] + [state[n] for n in names or ()]
    from torch.distributed.tensor import DTensor
    if names is None or any(not isinstance(t, torch.Tensor) or isinstance(t, DTensor) for t in tensors):
        return plain_update(param, grad, state, optimizer)  # a DTensor: traced as it is
    return tail_update(param, grad.contiguous(), [state[n] for n in names], optimizer_key(optimizer))


@contextlib.contextmanager
def opaque_updates():
    """Within the context, :func:`~shardproof.frontends.torch_train.optimizer_update` is one
    opaque call per parameter (see the module docstring)."""
    from . import torch_train
    saved = torch_train.OPAQUE_UPDATE[0]
    torch_train.OPAQUE_UPDATE[0] = _opaque
    try:
        yield
    finally:
        torch_train.OPAQUE_UPDATE[0] = saved
