"""ATen ops, part 1: elementwise arithmetic and views, declared once each.

The other ATen families live beside it: aten_rows (reductions, row-wise ops, norms,
contractions), aten_index (embedding, indexing, creation), aten_attention (SDPA) and
aten_backward (the backward ops of joint fw+bw graphs)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val, shape_of
from ..algebra.masks import make_fill
from ..algebra.ranks import LINEARITY
from ..algebra.terms import COMMUTATIVE, freeze
from .common import as_float, elementwise_op, erf, identity_op, template, tensor_args
from .registry import RuleCtx, declare

T = "aten."

# ------------------------------------------------------------------ elementwise

_UNARY = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sqrt": np.sqrt, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0.0),
    "silu": lambda x: x / (1.0 + np.exp(-x)), "sin": np.sin, "cos": np.cos, "abs": np.abs,
    "reciprocal": lambda x: 1.0 / x, "erf": erf, "log1p": np.log1p, "expm1": np.expm1,
    "square": np.square,
    "isinf": np.isinf, "isnan": np.isnan, "sign": np.sign,
}
for _name, _fn in _UNARY.items():
    elementwise_op(T + _name, lambda x, *a, _fn=_fn, **k: _fn(as_float(x) if np.asarray(x).dtype != bool else x))


def _triangle(kind: str, numerics):
    """triu/tril keep elements by their position in the last two dims (so those dims are
    materialized first) and commute with any selection of the leading (batch) dims."""
    def rule(ctx: RuleCtx, x: Val, diagonal=0):
        nd = len(x.vecs)
        x = layout.materialize(ctx.terms, x, [nd - 2, nd - 1])
        # not compute.elementwise: a position-dependent op must not be moved past a reshape
        return Val(ctx.terms.make(kind, (int(diagonal),), (x.t,), ctx.terms.shape(x.t)), x.vecs)
    declare(T + kind, numerics=lambda x, diagonal=0: numerics(x, diagonal), rule=rule, shape=lambda x, *a: x,
            doc=f"{kind} over the last two dims")


_triangle("triu", np.triu)
_triangle("tril", np.tril)


def _gelu(x, approximate="none"):
    x = as_float(x)
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


elementwise_op(T + "gelu", _gelu)

_BINARY = {
    "sub": (lambda a, b, alpha=1: np.subtract(a, np.multiply(b, alpha)), False),
    "pow": (lambda a, b: np.power(as_float(a), b), False),
    "maximum": (np.maximum, True), "minimum": (np.minimum, True),
    "eq": (np.equal, True), "ne": (np.not_equal, True), "lt": (np.less, False), "le": (np.less_equal, False),
    "gt": (np.greater, False), "ge": (np.greater_equal, False),
    "logical_and": (np.logical_and, True), "logical_or": (np.logical_or, True),
    "remainder": (np.remainder, False), "fmod": (np.fmod, False), "floor_divide": (np.floor_divide, False),
}
_BOOL_TERMS = {"logical_and": "and", "logical_or": "or"}  # bitwise ops: ops/casts.py (they depend on the dtype)
for _name, (_fn, _comm) in _BINARY.items():
    elementwise_op(T + _name, _fn, commutative=_comm, term=_BOOL_TERMS.get(_name))

LINEARITY.update({"sub": "all", "scale": "all"})


def _scaled(ctx: RuleCtx, x: Val, c) -> Val:
    return Val(compute.scale(ctx.terms, x.t, c), x.vecs)


def _add_rule(ctx: RuleCtx, a, b, alpha=1):
    if isinstance(b, Val) and alpha != 1:
        b = _scaled(ctx, b, Fraction(alpha))
    if isinstance(a, Val) and isinstance(b, Val):
        return compute.elementwise(ctx.terms, "add", (), [a, b], commutative=True)
    x, c = (a, b) if isinstance(a, Val) else (b, a)
    return compute.elementwise(ctx.terms, "add_const", (freeze(c),), [x])


def _mul_rule(ctx: RuleCtx, a, b):
    if isinstance(a, Val) and isinstance(b, Val):
        return compute.elementwise(ctx.terms, "mul", (), [a, b], commutative=True)
    x, c = (a, b) if isinstance(a, Val) else (b, a)
    return _scaled(ctx, x, Fraction(c))


def _rsub_rule(ctx: RuleCtx, x, other, alpha=1):
    """other - alpha * x."""
    return _add_rule(ctx, other, x, alpha=-alpha) if isinstance(other, Val) else \
        compute.elementwise(ctx.terms, "add_const", (freeze(other),), [_scaled(ctx, x, -Fraction(alpha))])


def _div_rule(ctx: RuleCtx, a, b, rounding_mode=None):
    if isinstance(b, Val):  # a tensor holding one known number (a token count) divides exactly
        value = layout.scalar_value(ctx.terms, b)
        b = b if value is None or value == 0 or isinstance(value, bool) else value
    if rounding_mode is None and isinstance(a, Val) and not isinstance(b, Val):
        return _scaled(ctx, a, 1 / Fraction(b))
    return compute.elementwise(ctx.terms, "div", template((a, b), {"rounding_mode": rounding_mode}),
                               tensor_args((a, b)))


def _div_num(a, b, rounding_mode=None):
    q = np.divide(as_float(a), b)
    return {"trunc": np.trunc, "floor": np.floor}.get(rounding_mode, lambda v: v)(q)


from .common import elementwise_shape  # noqa: E402

declare(T + "add", numerics=lambda a, b, alpha=1: np.add(a, np.multiply(b, alpha)), rule=_add_rule,
        shape=elementwise_shape, doc="a + alpha*b; scalars fold into the term")
declare(T + "mul", numerics=lambda a, b: np.multiply(a, b), rule=_mul_rule, shape=elementwise_shape,
        doc="a*b; multiplying by a constant is an exact scale")
declare(T + "div", numerics=_div_num, rule=_div_rule, shape=elementwise_shape, doc="a/b")
declare(T + "rsub", numerics=lambda x, other, alpha=1: np.subtract(other, np.multiply(x, alpha)), rule=_rsub_rule,
        shape=elementwise_shape, doc="other - alpha * x")
declare(T + "neg", numerics=lambda x: -as_float(x), rule=lambda ctx, x: _scaled(ctx, x, -1),
        shape=elementwise_shape, doc="-x, an exact scale by -1")
LINEARITY.update({"add": "all", "mul": "one", "add_const": "none", "div": "first"})
COMMUTATIVE.update({"add", "mul"})


def _where_num(c, a, b):
    return np.where(np.asarray(c, dtype=bool), a, b)


def _where_rule(ctx: RuleCtx, cond, a, b):
    """where(cond, a, b); a branch that is one known number (``torch.where(m, 0, x)``
    makes a scalar tensor) becomes an attribute, the same term as ``masked_fill``."""
    a, b = (_known_scalar(ctx, v) for v in (a, b))
    return compute.elementwise(ctx.terms, "where", template((cond, a, b), {}), tensor_args((cond, a, b)))


def _known_scalar(ctx: RuleCtx, v):
    if isinstance(v, Val) and not any(shape_of(ctx.terms, v)):
        value = layout.scalar_value(ctx.terms, v)
        return v if value is None else value
    return v


declare(T + "where", numerics=_where_num, rule=_where_rule, shape=elementwise_shape, doc="where(cond, a, b)")
declare(T + "masked_fill", numerics=lambda x, m, v: np.where(np.asarray(m, dtype=bool), v, x),
        rule=lambda ctx, x, m, v: compute.elementwise(ctx.terms, "where", template((m, v, x), {}), tensor_args((m, v, x))),
        shape=elementwise_shape, doc="where(mask, value, x)")
elementwise_op(T + "clamp", lambda x, lo=None, hi=None: np.clip(x, lo, hi))
LINEARITY["where"] = "none"


# dropout and bernoulli: ops/aten_misc.py

identity_op((T + "clone", T + "contiguous", T + "alias", T + "detach", T + "lift_fresh_copy",
             T + "_assert_tensor_metadata"),
            "copies keep the value (dtype casts: ops/casts.py)")


def _no_complex_rule(ctx: RuleCtx, x, *args, **kwargs):
    raise ValueError("complex tensors have no relation rules yet")


declare(T + "view_as_real_copy", numerics=lambda x: np.stack([np.real(x), np.imag(x)], axis=-1),
        rule=_no_complex_rule, shape=lambda x: (*x, 2),
        doc="a complex tensor's real and imaginary parts in a new trailing dim (no relation rule yet)")

# ------------------------------------------------------------------ views


declare((T + "view", T + "_unsafe_view", T + "reshape", T + "view_copy", T + "_reshape_alias"),
        numerics=lambda x, size, *a: np.reshape(x, size),
        rule=lambda ctx, x, size, *a: layout.reshape(ctx.terms, x, size), doc="reshape: layout follows, aligned blocks")
declare(T + "permute", numerics=lambda x, dims: np.transpose(x, dims),
        rule=lambda ctx, x, dims: layout.permute(ctx.terms, x, dims), doc="permute")


def _transpose_perm(nd, d0, d1):
    perm = list(range(nd))
    perm[d0 % nd], perm[d1 % nd] = perm[d1 % nd], perm[d0 % nd]
    return perm


declare(T + "transpose", numerics=lambda x, d0, d1: np.swapaxes(x, d0, d1),
        rule=lambda ctx, x, d0, d1: layout.permute(ctx.terms, x, _transpose_perm(len(x.vecs), d0, d1)), doc="transpose")
declare((T + "t", T + "numpy_T"), numerics=lambda x: np.transpose(x),
        rule=lambda ctx, x: layout.permute(ctx.terms, x, list(range(len(x.vecs)))[::-1]), doc="t")
declare(T + "unsqueeze", numerics=lambda x, d: np.expand_dims(x, d),
        rule=lambda ctx, x, d: layout.unsqueeze(ctx.terms, x, d), doc="unsqueeze")


def _squeeze_dims(nd_shape, dims):
    if dims is None:
        return [i for i, s in enumerate(nd_shape) if s == 1]
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [d % len(nd_shape) for d in dims if nd_shape[d % len(nd_shape)] == 1]


declare(T + "squeeze", numerics=lambda x, dims=None: np.squeeze(x, tuple(_squeeze_dims(np.shape(x), dims))),
        rule=lambda ctx, x, dims=None: layout.squeeze(ctx.terms, x, _squeeze_dims(shape_of(ctx.terms, x), dims)),
        doc="squeeze")
declare(T + "expand", numerics=lambda x, size, implicit=False: np.broadcast_to(
            x, [np.shape(x)[i - (len(size) - np.ndim(x))] if s == -1 else s for i, s in enumerate(size)]).copy(),
        rule=lambda ctx, x, size, implicit=False: layout.expand(ctx.terms, x, size), doc="broadcast a tensor")


def _slice_num(x, dim=0, start=None, end=None, step=1):
    idx = [slice(None)] * np.ndim(x)
    idx[dim] = slice(start, end, step)
    return x[tuple(idx)]


def _clip_bounds(size, start, end):
    start = 0 if start is None else start
    end = size if end is None else end
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(0, min(size, end + size if end < 0 else end))
    return start, end


def _slice_rule(ctx: RuleCtx, x: Val, dim=0, start=None, end=None, step=1):
    size = shape_of(ctx.terms, x)[dim]
    lo, hi = _clip_bounds(size, start, end)
    return layout.slice_(ctx.terms, x, dim % len(x.vecs), lo, hi, step)


declare(T + "slice", numerics=_slice_num, rule=_slice_rule, doc="basic slicing")


def slice_scatter_num(base, src, dim=0, start=None, end=None, step=1):
    out = as_float(base).copy()
    index = [slice(None)] * out.ndim
    index[dim] = slice(start, end, step)
    out[tuple(index)] = src
    return out


def slice_scatter_rule(ctx: RuleCtx, base: Val, src: Val, dim=0, start=None, end=None, step=1):
    """base with [start:end] along dim replaced by src: the concatenation of the kept
    pieces of base around src (exact; step 1 only)."""
    if step != 1:
        raise ValueError("slice_scatter with a step has no rule")
    dim %= len(base.vecs)
    size = shape_of(ctx.terms, base)[dim]
    lo, hi = _clip_bounds(size, start, end)
    pieces = [layout.slice_(ctx.terms, base, dim, 0, lo)] if lo > 0 else []
    pieces.append(src)
    if hi < size:
        pieces.append(layout.slice_(ctx.terms, base, dim, hi, size))
    return layout.concat(ctx.terms, pieces, dim) if len(pieces) > 1 else src


declare(T + "slice_scatter", numerics=slice_scatter_num, rule=slice_scatter_rule, doc="write a slice")


def _slice_backward_rule(ctx: RuleCtx, g: Val, sizes, dim, start, end, step):
    """The gradient between zero blocks along `dim`; the zeros are laid out like `g` on the
    other dims (a constant holds on any piece), so a rank's piece of g stays that piece."""
    if step != 1:
        raise ValueError("slice_backward with a step has no rule")
    dim %= len(sizes)
    lo, hi = _clip_bounds(sizes[dim], start, end)
    pieces = []
    for width in (lo, None, sizes[dim] - hi):
        if width is None:
            pieces.append(g)
        elif width:
            shape = list(ctx.terms.shape(g.t))
            shape[dim] = width
            zeros = make_fill(ctx.terms, 0, shape)
            pieces.append(Val(zeros, tuple(None if d == dim else v for d, v in enumerate(g.vecs))))
    return layout.concat(ctx.terms, pieces, dim) if len(pieces) > 1 else g


declare(T + "slice_backward",
        numerics=lambda g, sizes, dim, start, end, step: slice_scatter_num(np.zeros(sizes), g, dim, start, end, step),
        rule=_slice_backward_rule, doc="slice's backward: the gradient written into zeros of the input's shape")
declare(T + "narrow", numerics=lambda x, dim, start, length: _slice_num(x, dim, start, start + length),
        rule=lambda ctx, x, dim, start, length: _slice_rule(ctx, x, dim, start, start + length), doc="narrow")
declare(T + "select", numerics=lambda x, dim, index: np.take(x, index, axis=dim),
        rule=lambda ctx, x, dim, index: layout.select(ctx.terms, x, dim % len(x.vecs),
                                                      index % shape_of(ctx.terms, x)[dim]), doc="select")


def _split_points(size, sizes):
    bounds, at = [], 0
    for s in sizes:
        bounds.append((at, min(size, at + s)))
        at += s
    return bounds


def _even_sizes(size, split_size):
    return [split_size] * (-(-size // split_size)) if size else [0]  # torch: one empty piece


def split_rule(ctx: RuleCtx, x: Val, sizes, dim=0):
    size = shape_of(ctx.terms, x)[dim]
    return tuple(layout.slice_(ctx.terms, x, dim % len(x.vecs), lo, hi) for lo, hi in _split_points(size, sizes))


def split_num(x, sizes, dim=0):
    return tuple(_slice_num(x, dim, lo, hi) for lo, hi in _split_points(np.shape(x)[dim], sizes))


declare(T + "split_with_sizes", numerics=split_num, rule=split_rule, doc="split into given sizes")
declare(T + "split", numerics=lambda x, s, dim=0: split_num(x, _even_sizes(np.shape(x)[dim], s) if isinstance(s, int) else s, dim),
        rule=lambda ctx, x, s, dim=0: split_rule(
            ctx, x, _even_sizes(shape_of(ctx.terms, x)[dim], s) if isinstance(s, int) else s, dim), doc="split")


def _chunk_sizes(size, chunks):
    if size == 0:  # torch.chunk of an empty dim gives `chunks` empty pieces
        return [0] * chunks
    return _even_sizes(size, -(-size // chunks))


declare(T + "chunk", numerics=lambda x, n, dim=0: split_num(x, _chunk_sizes(np.shape(x)[dim], n), dim),
        rule=lambda ctx, x, n, dim=0: split_rule(ctx, x, _chunk_sizes(shape_of(ctx.terms, x)[dim], n), dim),
        doc="torch.chunk")
declare(T + "unbind", numerics=lambda x, dim=0: tuple(np.moveaxis(x, dim, 0)),
        rule=lambda ctx, x, dim=0: tuple(layout.select(ctx.terms, x, dim % len(x.vecs), i)
                                         for i in range(shape_of(ctx.terms, x)[dim])), doc="unbind")
declare(T + "cat", numerics=lambda xs, dim=0: np.concatenate([as_float(x) for x in xs], axis=dim),
        rule=lambda ctx, xs, dim=0: layout.concat(ctx.terms, list(xs), dim), doc="concatenate")
declare(T + "stack", numerics=lambda xs, dim=0: np.stack(xs, axis=dim),
        rule=lambda ctx, xs, dim=0: layout.concat(ctx.terms, [layout.unsqueeze(ctx.terms, x, dim) for x in xs], dim),
        doc="stack")


def _repeat_rule(ctx: RuleCtx, x: Val, repeats):
    while len(x.vecs) < len(repeats):
        x = layout.unsqueeze(ctx.terms, x, 0)
    for d, r in enumerate(repeats):
        if r != 1:
            x = layout.concat(ctx.terms, [x] * r, d)
    return x


declare(T + "repeat", numerics=lambda x, reps: np.tile(x, reps), rule=_repeat_rule, doc="tile")
declare("getitem", numerics=lambda xs, i: xs[i], rule=lambda ctx, xs, i: xs[i], doc="tuple element")
