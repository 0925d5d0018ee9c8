"""Rule of the opaque per-parameter optimizer update ``shardproof_tail.update(param, grad,
states, key)`` (:mod:`shardproof.frontends.torch_tail_calls`): a training step's per-parameter
tail, one node per parameter, whose meaning is a class contract (issue 16, the step's tail).

Term: on the single device, ``tail_update[key](P, G, S...)``: the optimizer named by `key`
(its type and every hyperparameter) applied to the whole parameter ``P``, gradient ``G`` and
state tensors ``S``. On a rank, the rule applies only when the parameter, gradient and every
state operand hold **the same selection** ``V`` of whole tensors of one shape ``shape``, and
the class ``(key, shape, dtype, V)`` is in :data:`PROVED`; the output then holds ``V`` of
``tail_update[key](P, G, S...)``. Anything else raises: the engine answers unknown, naming the
op (and the step falls back to its full trace).

Why it is sound: a class enters :data:`PROVED` only after the engine proved, on the traced
update itself at that shape and dtype with every operand holding the class's layout on each
rank (:mod:`shardproof.step_tail`), that the rank's output holds that layout of the
single-device update: for all values, so for whatever ``P``, ``G``, ``S`` the step supplies.
Another key (another learning rate, weight decay, optimizer) is another term: a rank that
updates with other hyperparameters than the single device does not hold the single device's
update. The table is set only for the duration of one step's proof."""
from __future__ import annotations

import numpy as np

from ..algebra.layout import Val
from .registry import declare

UPDATE = "shardproof_tail.update"

PROVED: set = set()
"""Classes ``(key, shape, dtype, selection)`` whose contract the engine proved."""
KERNELS: dict = {}
"""key -> ``fn(param, grad, states)`` on torch tensors: the update's numerics (set with PROVED)."""


class NotCovered(ValueError):
    """The operands are not what a proved class assumed: the rule does not apply."""


def selection(vecs, shape) -> tuple:
    """A layout's vectors as a hashable selection; a dim held whole is None."""
    out = []
    for v, n in zip(vecs, shape):
        if v is not None and not (len(v) == n and np.array_equal(v, np.arange(n))):
            out.append(np.asarray(v, dtype=np.int64).tobytes())
        else:
            out.append(None)
    return tuple(out)


def class_of(key: str, shape, dtype, sel) -> tuple:
    return (key, tuple(shape), str(dtype), sel)


def _update_rule(ctx, param, grad, states, key):
    terms = ctx.terms
    operands = [param, grad, *states]
    if not all(isinstance(v, Val) for v in operands):
        raise NotCovered("an operand of the update is not a selection of a single-device tensor")
    shape = tuple(terms.shape(param.t))
    if any(tuple(terms.shape(v.t)) != shape for v in operands):
        raise NotCovered("the update's operands are pieces of tensors of different shapes")
    sel = selection(param.vecs, shape)
    if any(selection(v.vecs, shape) != sel for v in operands[1:]):
        raise NotCovered("the update's operands hold different selections")
    dtype = getattr(getattr(ctx.node, "type", None), "dtype", None)
    if any(s is not None for s in sel) and class_of(key, shape, dtype, sel) not in PROVED:
        raise NotCovered(f"no proved update class for {key} at {list(shape)} with this layout")
    out = terms.make("tail_update", (key,), tuple(v.t for v in operands), shape)
    return Val(out, param.vecs)


def _numerics(param, grad, states, key):
    import torch
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    return KERNELS[key](t(param), t(grad), [t(s) for s in states]).numpy()


declare(UPDATE, numerics=_numerics, rule=_update_rule,
        doc="one parameter's optimizer update as an opaque call whose meaning is its proved class contract")
