"""Shared pieces for op declarations: argument handling and family constructors."""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ..algebra import compute
from ..algebra.layout import Val
from ..algebra.terms import COMMUTATIVE, freeze
from .registry import RuleCtx, declare


def tensor_args(args: Sequence[Any]) -> list[Val]:
    return [a for a in args if isinstance(a, Val)]


def template(args: Sequence[Any], kwargs: dict) -> tuple:
    """Constant arguments, with tensor positions marked, as hashable term attributes."""
    pos = tuple("$" if isinstance(a, Val) else freeze(a) for a in args)
    return pos + (freeze({k: v for k, v in kwargs.items() if not isinstance(v, Val)}),)


def broadcast_shape(*shapes) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))


def elementwise_shape(*args, **kwargs):
    """Shape rule of elementwise ops: numpy broadcasting of the tensor operands
    (the engine passes tensors as their TensorType)."""
    return broadcast_shape(*[a.shape for a in args if hasattr(a, "shape") and not isinstance(a, np.ndarray)])


def elementwise_op(name: str, fn: Callable, *, commutative: bool = False, term: str | None = None,
                   doc: str = "", torch_impl: Callable | None = None) -> None:
    """Declare an elementwise op: exact on any common selection of its operands."""
    term_op = term or name.split(".")[-1]
    if commutative:
        COMMUTATIVE.add(term_op)

    def rule(ctx: RuleCtx, *args, **kwargs):
        return compute.elementwise(ctx.terms, term_op, template(args, kwargs), tensor_args(args),
                                   commutative=commutative)

    declare(name, numerics=fn, rule=rule, shape=elementwise_shape, doc=doc or f"elementwise {term_op}",
            torch_impl=torch_impl)


def identity_op(names, doc: str) -> None:
    """Value-preserving ops (copies, dtype casts: assumed exact, reported as an assumption)."""
    declare(names, numerics=lambda x, *a, **k: np.array(x, dtype=np.float64 if np.asarray(x).dtype != bool else bool),
            rule=lambda ctx, x, *a, **k: x, shape=lambda x, *a, **k: x, doc=doc)


def as_float(x):
    return np.asarray(x, dtype=np.float64)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _erf(as_float(x))
