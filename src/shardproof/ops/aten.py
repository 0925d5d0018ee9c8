"""ATen ops: the forward ops of GPT-2 / Llama-style blocks, declared once each."""
from __future__ import annotations

import math

from fractions import Fraction
from weakref import WeakKeyDictionary

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val, prod, shape_of
from ..algebra.masks import make_fill
from ..algebra.ranks import LINEARITY
from ..algebra.terms import COMMUTATIVE, freeze
from .common import as_float, elementwise_op, erf, identity_op, template, tensor_args
from .pairing import fits as _fits, pairing_of as _pairing, paired_dot
from .registry import RuleCtx, declare
from .embedding_clamped import clamped_block
from .sdpa_gqa_backward import gqa_backward, gqa_backward_num
from .sdpa_reuse import earlier_selection, record

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


def _slice_scatter_num(base, src, dim=0, start=None, end=None, step=1):
    out = as_float(base).copy()
    index = [slice(None)] * out.ndim
    index[dim] = slice(start, end, step)
    out[tuple(index)] = src
    return out


def _slice_scatter_rule(ctx: RuleCtx, base: Val, src: Val, dim=0, start=None, end=None, step=1):
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


declare(T + "slice_scatter", numerics=_slice_scatter_num, rule=_slice_scatter_rule, doc="write a slice")


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
        numerics=lambda g, sizes, dim, start, end, step: _slice_scatter_num(np.zeros(sizes), g, dim, start, end, step),
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


def _split_rule(ctx: RuleCtx, x: Val, sizes, dim=0):
    size = shape_of(ctx.terms, x)[dim]
    return tuple(layout.slice_(ctx.terms, x, dim % len(x.vecs), lo, hi) for lo, hi in _split_points(size, sizes))


def _split_num(x, sizes, dim=0):
    return tuple(_slice_num(x, dim, lo, hi) for lo, hi in _split_points(np.shape(x)[dim], sizes))


declare(T + "split_with_sizes", numerics=_split_num, rule=_split_rule, doc="split into given sizes")
declare(T + "split", numerics=lambda x, s, dim=0: _split_num(x, _even_sizes(np.shape(x)[dim], s) if isinstance(s, int) else s, dim),
        rule=lambda ctx, x, s, dim=0: _split_rule(
            ctx, x, _even_sizes(shape_of(ctx.terms, x)[dim], s) if isinstance(s, int) else s, dim), doc="split")


def _chunk_sizes(size, chunks):
    if size == 0:  # torch.chunk of an empty dim gives `chunks` empty pieces
        return [0] * chunks
    return _even_sizes(size, -(-size // chunks))


declare(T + "chunk", numerics=lambda x, n, dim=0: _split_num(x, _chunk_sizes(np.shape(x)[dim], n), dim),
        rule=lambda ctx, x, n, dim=0: _split_rule(ctx, x, _chunk_sizes(shape_of(ctx.terms, x)[dim], n), dim),
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

# ------------------------------------------------------------------ reductions

LINEARITY.update({"sum": "all", "reshape": "all", "permute": "all", "select": "all", "expand": "all",
                  "gather": "all", "take": "all", "cat": "all", "dot": "one", "embedding": "none"})


def _dims(x_nd, dim):
    if dim is None or dim == [] or dim == ():
        return list(range(x_nd))
    return [d % x_nd for d in ([dim] if isinstance(dim, int) else dim)]


def _sum_rule(ctx: RuleCtx, x: Val, dim=None, keepdim=False, dtype=None):
    return compute.reduction(ctx.terms, "sum", (), x, _dims(len(x.vecs), dim), keepdim, combinable=True)


def _mean_rule(ctx: RuleCtx, x: Val, dim=None, keepdim=False, dtype=None):
    dims = _dims(len(x.vecs), dim)
    n = prod(shape_of(ctx.terms, x)[d] for d in dims)
    s = _sum_rule(ctx, x, dims, keepdim)
    return _scaled(ctx, s, Fraction(1, n))


def _extreme_rule(op):
    def rule(ctx: RuleCtx, x: Val, dim=None, keepdim=False):
        return compute.reduction(ctx.terms, op, (), x, _dims(len(x.vecs), dim), keepdim, combinable=True)
    return rule


def _np_dims(x, dim):
    return tuple(_dims(np.ndim(x), dim))


declare(T + "sum", numerics=lambda x, dim=None, keepdim=False, dtype=None: np.sum(as_float(x), axis=_np_dims(x, dim), keepdims=keepdim),
        rule=_sum_rule, doc="sum; over a sharded dim it is a partial sum")
declare(T + "mean", numerics=lambda x, dim=None, keepdim=False, dtype=None: np.mean(as_float(x), axis=_np_dims(x, dim), keepdims=keepdim),
        rule=_mean_rule, doc="mean = sum / n")
declare(T + "amax", numerics=lambda x, dim=None, keepdim=False: np.max(x, axis=_np_dims(x, dim), keepdims=keepdim),
        rule=_extreme_rule("amax"), doc="max over dims; over a sharded dim a partial max")
declare(T + "amin", numerics=lambda x, dim=None, keepdim=False: np.min(x, axis=_np_dims(x, dim), keepdims=keepdim),
        rule=_extreme_rule("amin"), doc="min over dims")


def _max_num(x, dim=None, keepdim=False):
    if dim is None:
        return np.max(x)
    return np.max(x, axis=dim, keepdims=keepdim), np.argmax(x, axis=dim) if not keepdim else np.expand_dims(np.argmax(x, axis=dim), dim)


def _max_rule(ctx: RuleCtx, x: Val, dim=None, keepdim=False):
    if dim is None:
        return _extreme_rule("amax")(ctx, x)
    vals = _extreme_rule("amax")(ctx, x, dim, keepdim)
    idx = compute.reduction(ctx.terms, "argmax", (), x, [dim], keepdim, combinable=False)
    return (vals, idx)


declare(T + "max", numerics=_max_num, rule=_max_rule, doc="max (values, indices)")
declare(T + "argmax", numerics=lambda x, dim=None, keepdim=False: np.argmax(x, axis=dim) if not keepdim else np.expand_dims(np.argmax(x, axis=dim), dim),
        rule=lambda ctx, x, dim=None, keepdim=False: compute.reduction(ctx.terms, "argmax", (), x, _dims(len(x.vecs), dim), keepdim, combinable=False),
        doc="argmax (not combinable across shards)")


def _var_mean_num(x, dim=None, correction=1, keepdim=False):
    ax = _np_dims(x, dim)
    return np.var(as_float(x), axis=ax, ddof=correction, keepdims=keepdim), np.mean(as_float(x), axis=ax, keepdims=keepdim)


def _var_mean_rule(ctx: RuleCtx, x: Val, dim=None, correction=1, keepdim=False):
    dims = _dims(len(x.vecs), dim)
    var = compute.reduction(ctx.terms, "var", (freeze(correction),), x, dims, keepdim, combinable=False)
    return (var, _mean_rule(ctx, x, dims, keepdim))


declare(T + "var_mean", numerics=_var_mean_num, rule=_var_mean_rule, doc="variance and mean")
declare(T + "var", numerics=lambda x, dim=None, correction=1, keepdim=False: _var_mean_num(x, dim, correction, keepdim)[0],
        rule=lambda ctx, x, dim=None, correction=1, keepdim=False: _var_mean_rule(ctx, x, dim, correction, keepdim)[0],
        doc="variance")

# ------------------------------------------------------------------ row-wise ops


def _softmax_num(x, dim, *a):
    x = as_float(x)
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def _log_softmax_num(x, dim, *a):
    x = as_float(x)
    m = np.max(x, axis=dim, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=dim, keepdims=True))


def _along(op):
    """softmax-like ops: exact on any selection of the dims they do not normalize."""
    def rule(ctx: RuleCtx, x: Val, dim, *a):
        nd = len(x.vecs)
        moved = layout.permute(ctx.terms, x, [d for d in range(nd) if d != dim % nd] + [dim % nd])
        out = compute.rowwise(ctx.terms, op, (), [moved], 1, [shape_of(ctx.terms, moved)])[0]
        back = list(range(nd - 1))
        back.insert(dim % nd, nd - 1)
        return layout.permute(ctx.terms, out, back)
    return rule


declare((T + "_softmax", T + "softmax"), numerics=_softmax_num, rule=_along("softmax"), doc="softmax along a dim")
declare((T + "_log_softmax", T + "log_softmax"), numerics=_log_softmax_num, rule=_along("log_softmax"),
        doc="log-softmax along a dim")


def _safe_softmax_num(x, dim, *a):
    x = as_float(x)
    masked = np.all(x == -np.inf, axis=dim, keepdims=True)
    with np.errstate(invalid="ignore"):
        return np.where(masked, 0.0, _softmax_num(x, dim))


declare(T + "_safe_softmax", numerics=_safe_softmax_num, rule=_along("safe_softmax"),
        doc="softmax along a dim, 0 on rows that are entirely -inf (attention's math form)")


def _layer_norm_num(x, shape, w=None, b=None, eps=1e-5):
    x = as_float(x)
    ax = tuple(range(np.ndim(x) - len(shape), np.ndim(x)))
    mean = np.mean(x, axis=ax, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=ax, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    y = (x - mean) * rstd
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y, mean, rstd


def _norm_rule(op, n_out):
    def rule(ctx: RuleCtx, x: Val, shape, *rest, **kw):
        operands = [x] + [a for a in rest if isinstance(a, Val)]
        attrs = template((x, shape) + tuple(rest), kw)
        outs = compute.rowwise(ctx.terms, op, attrs, operands, len(shape), ctx.out_shapes()[:n_out])
        return tuple(outs) if n_out > 1 else outs[0]
    return rule


declare(T + "native_layer_norm", numerics=_layer_norm_num, rule=_norm_rule("layer_norm", 3),
        doc="layer norm over the trailing dims (out, mean, rstd)")
declare(T + "layer_norm", numerics=lambda x, shape, w=None, b=None, eps=1e-5, *a: _layer_norm_num(x, shape, w, b, eps)[0],
        rule=_norm_rule("layer_norm", 1), doc="layer norm")


def _rms_norm_num(x, shape, w=None, eps=None):
    x = as_float(x)
    ax = tuple(range(np.ndim(x) - len(shape), np.ndim(x)))
    eps = np.finfo(np.float32).eps if eps is None else eps
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=ax, keepdims=True) + eps)
    y = x * rstd
    return (y * w if w is not None else y), rstd


declare(T + "_fused_rms_norm", numerics=_rms_norm_num, rule=_norm_rule("rms_norm", 2), doc="RMS norm (out, rstd)")
declare(T + "rms_norm", numerics=lambda *a, **k: _rms_norm_num(*a, **k)[0], rule=_norm_rule("rms_norm", 1),
        doc="RMS norm")

# ------------------------------------------------------------------ contractions


def _dot_nd(ctx: RuleCtx, a: Val, b: Val) -> Val:
    """matmul semantics: batch dims of equal rank are batched, a 2-D rhs is shared."""
    na, nb = len(a.vecs), len(b.vecs)
    if nb == 2 or na == 1 or nb == 1:
        return compute.dot(ctx.terms, a, b, (), (), (na - 1,), (0,) if nb <= 2 else (nb - 2,))
    nbatch = na - 2
    sa, sb = shape_of(ctx.terms, a), shape_of(ctx.terms, b)
    if na == nb and tuple(sa[:nbatch]) != tuple(sb[:nbatch]):
        # torch broadcasts batch dims (a local extent 1 against 3 is repeated): not a batched product
        raise ValueError(f"matmul batch dims {tuple(sa[:-2])} and {tuple(sb[:-2])} broadcast: no rule")
    return paired_dot(ctx.terms, a, b, tuple(range(nbatch)), tuple(range(nbatch)), (na - 1,), (nb - 2,))


def _affine(ctx: RuleCtx, prod_val: Val, bias, beta=1, alpha=1) -> Val:
    out = _scaled(ctx, prod_val, Fraction(alpha)) if alpha != 1 else prod_val
    if bias is None or beta == 0:
        return out
    bias = _scaled(ctx, bias, Fraction(beta)) if beta != 1 else bias
    return compute.elementwise(ctx.terms, "add", (), [out, bias], commutative=True)


declare((T + "mm", T + "bmm", T + "matmul"), numerics=lambda a, b: np.matmul(as_float(a), as_float(b)),
        rule=lambda ctx, a, b: _dot_nd(ctx, a, b), doc="matrix product (block-matrix lemma over sharded K)")
def _affine_num(c, a, b, beta=1, alpha=1):
    """beta*c + alpha*(a@b); with beta 0, c is ignored as torch does (its nan and inf too: an
    uninitialized buffer, as megatron-core's attention passes to baddbmm)."""
    prod = alpha * np.matmul(as_float(a), as_float(b))
    return prod + np.zeros(np.shape(c)) if beta == 0 else beta * as_float(c) + prod


declare((T + "addmm", T + "baddbmm"), numerics=_affine_num,
        rule=lambda ctx, c, a, b, beta=1, alpha=1: _affine(ctx, _dot_nd(ctx, a, b), c, beta, alpha),
        doc="beta*c + alpha*(a@b)")
declare(T + "linear", numerics=lambda x, w, b=None: np.matmul(as_float(x), as_float(w).T) + (0 if b is None else b),
        rule=lambda ctx, x, w, b=None: _affine(ctx, compute.dot(ctx.terms, x, w, (), (), (len(x.vecs) - 1,), (1,)), b),
        doc="x @ w.T + b")

# ------------------------------------------------------------------ embedding and indexing


def _embedding_rule(ctx: RuleCtx, w: Val, ids: Val, *a):
    w = layout.materialize(ctx.terms, w, [0])
    tshape = ctx.terms.shape(ids.t) + (ctx.terms.shape(w.t)[1],)
    t = ctx.terms.make("embedding", (), (w.t, ids.t), tshape)
    return Val(t, ids.vecs + (w.vecs[1],))


declare(T + "embedding", numerics=lambda w, ids, *a: as_float(w)[np.asarray(ids, dtype=np.int64)],
        rule=_embedding_rule, doc="row lookup; rows selected by the ids' layout")


def _opaque(op):
    """A rule that keeps the op exact but makes no claim about selections of it."""
    def rule(ctx: RuleCtx, *args, **kwargs):
        vals = [layout.materialize(ctx.terms, v) for v in tensor_args(args)]
        it = iter(vals)
        args = [next(it) if isinstance(a, Val) else a for a in args]
        flat = tuple(v.t for v in vals)
        outs = [Val(ctx.terms.make(op, template(args, kwargs) + (i,), flat, s), (None,) * len(s))
                for i, s in enumerate(ctx.out_shapes())]
        return tuple(outs) if isinstance(ctx.node.type, tuple) else outs[0]
    return rule


def _index_num(x, indices):
    return np.asarray(x)[tuple(slice(None) if i is None else np.asarray(i, dtype=np.int64 if np.asarray(i).dtype != bool else bool)
                               for i in indices)]


def _is_row_range(terms, idx, n: int) -> bool:
    """Whether `idx` is the constant arange(0, n)."""
    t = terms[idx.t]
    return t.op == "arange" and t.shape == (n,) and [a for a in t.attrs[:-1] if a != "$"] in ([n], [0, n], [0, n, 1])


def _is_integer(ctx: RuleCtx, arg: int) -> bool:
    """Whether the node's `arg`-th argument (an index list: its first entry) holds integers."""
    a = ctx.node.args[arg]
    a = a[0] if isinstance(a, (list, tuple)) and a else a
    ty = getattr(a, "type", None)
    return ty is not None and not isinstance(ty, tuple) and ty.dtype.startswith(("i", "u"))


def _index_rule(ctx: RuleCtx, x: Val, indices):
    if (len(indices) == 2 and all(isinstance(i, Val) for i in indices) and len(x.vecs) == 2
            and _is_row_range(ctx.terms, indices[0], shape_of(ctx.terms, x)[0])
            and shape_of(ctx.terms, indices[1]) == (shape_of(ctx.terms, x)[0],)):
        return _take_along(ctx, x, indices[1], 1)  # x[arange(n), idx]
    if len(indices) == 1 and isinstance(indices[0], Val) and _is_integer(ctx, 1) and len(x.vecs) == 2:
        return _embedding_rule(ctx, x, indices[0])  # table[ids] is a lookup of rows (of a 2-D table)
    vals = [i for i in indices if isinstance(i, Val)]
    x = layout.materialize(ctx.terms, x)
    vals = [layout.materialize(ctx.terms, v) for v in vals]
    pattern = tuple("$" if isinstance(i, Val) else None for i in indices)
    s = ctx.out_shapes()[0]
    return Val(ctx.terms.make("index", pattern, (x.t,) + tuple(v.t for v in vals), s), (None,) * len(s))


declare(T + "index", numerics=_index_num, rule=_index_rule, doc="advanced indexing (exact, no selection lemma)")


def _index_put_num(x, indices, values, accumulate=False):
    out = as_float(x).copy()
    key = tuple(slice(None) if i is None else np.asarray(i) if np.asarray(i).dtype == bool
                else np.asarray(i).astype(np.int64) for i in indices)
    if accumulate:
        np.add.at(out, key, values)
    else:
        out[key] = values
    return out


def _index_put_rule(ctx: RuleCtx, x: Val, indices, values, accumulate=False):
    """x[mask] = v with a boolean mask over x's leading dims is where(mask, v, x)."""
    idx_nodes = [a for a in ctx.node.args[1] if a is not None]
    if (not accumulate and len(indices) == 1 and isinstance(indices[0], Val)
            and idx_nodes and idx_nodes[0].type.dtype in ("b8", "bool")):
        mask = indices[0]
        for _ in range(len(x.vecs) - len(mask.vecs)):
            mask = layout.unsqueeze(ctx.terms, mask, -1)
        fill = layout.scalar_value(ctx.terms, values)
        if fill is not None:  # x[mask] = c: the same term as masked_fill(x, mask, c)
            return compute.elementwise(ctx.terms, "where", ("$", freeze(fill), "$", ()), [mask, x])
        return compute.elementwise(ctx.terms, "where", ("$", "$", "$", ()), [mask, values, x])
    if (not accumulate and len(indices) == 2 and all(isinstance(i, Val) for i in indices) and len(x.vecs) == 2
            and isinstance(values, Val) and _is_row_range(ctx.terms, indices[0], shape_of(ctx.terms, x)[0])
            and shape_of(ctx.terms, indices[1]) == (shape_of(ctx.terms, x)[0],) and _is_integer(ctx, 1)
            and str(getattr(getattr(ctx.node.args[1][1], "type", None), "dtype", "")).startswith(("i", "u"))):
        return _put_along_rows(ctx, x, indices[1], values)  # x[arange(n), idx] = v: one write per row
    return _opaque("index_put")(ctx, x, indices, values, accumulate)


declare(T + "index_put", numerics=_index_put_num, rule=_index_put_rule, doc="indexed assignment")
def _gather_rule(ctx: RuleCtx, x: Val, dim, idx: Val, *a, **k):
    """torch.gather with one index per row along `dim` is a pick (take_along)."""
    nd = len(x.vecs)
    dim %= nd
    xs, ids = shape_of(ctx.terms, x), shape_of(ctx.terms, idx)
    if ids[dim] != 1 or any(ids[d] != xs[d] for d in range(nd) if d != dim):
        return _opaque("gather_along")(ctx, x, dim, idx, *a, **k)
    picked = _take_along(ctx, x, layout.materialize(ctx.terms, layout.squeeze(ctx.terms, idx, [dim])), dim)
    return layout.unsqueeze(ctx.terms, picked, dim)


declare(T + "gather", numerics=lambda x, dim, idx, *a: np.take_along_axis(as_float(x), np.asarray(idx, dtype=np.int64), dim),
        rule=_gather_rule, doc="torch.gather")
declare(T + "index_select", numerics=lambda x, dim, idx: np.take(x, np.asarray(idx, dtype=np.int64), axis=dim),
        rule=_opaque("index_select"), doc="index_select")


def _nll_num(logp, target, weight=None, reduction=1, ignore_index=-100):
    logp = as_float(logp)
    t = np.asarray(target, dtype=np.int64)
    valid = t != ignore_index
    picked = -np.take_along_axis(logp, np.where(valid, t, 0)[..., None], axis=-1)[..., 0] * valid
    total = float(valid.sum())
    out = {0: picked, 1: picked.sum() / total, 2: picked.sum()}[reduction]
    return out, np.asarray(total if reduction else 0.0)


def _take_along(ctx: RuleCtx, x: Val, idx: Val, dim: int) -> Val:
    """x[i, idx_i] along `dim`: exact on a selection of the other dims when idx is whole, or
    when idx holds the same selection of a term of the same extent there (a microbatch's rows
    of the logits and of the targets): the pick of the whole terms, at those positions."""
    x = layout.materialize(ctx.terms, x, [dim])
    vecs = x.vecs[:dim] + x.vecs[dim + 1:]
    others = ctx.terms.shape(x.t)[:dim] + ctx.terms.shape(x.t)[dim + 1:]
    aligned = others == ctx.terms.shape(idx.t) and all(layout.same_vec(a, b) for a, b in zip(vecs, idx.vecs))
    if not aligned and (any(v is not None for v in idx.vecs) or any(v is not None for v in vecs)):
        x, idx, vecs = layout.materialize(ctx.terms, x), layout.materialize(ctx.terms, idx), (None,) * len(vecs)
    shape = ctx.terms.shape(idx.t)
    return Val(ctx.terms.make("take_along", (dim,), (x.t, idx.t), shape), tuple(vecs))


def _nll_rule(ctx: RuleCtx, logp: Val, target: Val, weight=None, reduction=1, ignore_index=-100):
    """-logp[i, target_i], reduced; assumes no target equals ignore_index (stated)."""
    if weight is not None:
        raise ValueError("nll_loss with class weights has no rule")
    picked = _take_along(ctx, logp, target, len(logp.vecs) - 1)
    n = prod(shape_of(ctx.terms, picked))
    if reduction == 0:
        loss = _scaled(ctx, picked, -1)
    else:
        total = compute.reduction(ctx.terms, "sum", (), picked, list(range(len(picked.vecs))), False, combinable=True)
        loss = _scaled(ctx, total, Fraction(-1, n) if reduction == 1 else -1)
    return loss, _fill(ctx, float(n) if reduction else 0.0, ())  # torch's total_weight is 0 without reduction


declare(T + "nll_loss_forward", numerics=_nll_num, rule=_nll_rule, doc="negative log-likelihood (targets valid)")

# ------------------------------------------------------------------ attention


def _sdpa_scores(q, k, is_causal, attn_mask, scale):
    """Scaled, masked attention scores q k^T (the numerics shared by forward and backward)."""
    s = (1 / np.sqrt(q.shape[-1])) if scale is None else scale
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * s
    if is_causal:
        L, S = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((L, S), bool)), scores, -np.inf)
    if attn_mask is not None:
        m = np.asarray(attn_mask)
        scores = np.where(m, scores, -np.inf) if m.dtype == bool else scores + m
    return scores, s


def _gqa_repeat(q, kv):
    """Key/value heads repeated in place to the query's head count (grouped-query attention)."""
    hq, hkv = (np.shape(x)[-3] if np.ndim(x) >= 3 else 0 for x in (q, kv))
    return np.repeat(kv, hq // hkv, axis=-3) if hkv and hq != hkv and hq % hkv == 0 else kv


def _sdpa_num(q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None, **kw):
    q, k, v = as_float(q), as_float(k), as_float(v)
    k, v = _gqa_repeat(q, k), _gqa_repeat(q, v)
    scores, _ = _sdpa_scores(q, k, is_causal, attn_mask, scale)
    mx = scores.max(-1, keepdims=True)
    e = np.exp(scores - mx)
    lse = (np.log(e.sum(-1)) + mx[..., 0])
    return np.matmul(e / e.sum(-1, keepdims=True), v), lse


def _pairings(terms, ops: list, d: int):
    """Per k/v operand: (pairing, q positions, its positions, q extent, its extent), or None."""
    qsize = terms.shape(ops[0].t)[d]
    qpos = layout.vec_array(ops[0].vecs[d], qsize)
    out = []
    for o in ops[1:]:
        size = terms.shape(o.t)[d]
        pos = layout.vec_array(o.vecs[d], size)
        pairing = _pairing(qpos, pos, qsize, size)
        if pairing is None:
            return None
        out.append((pairing, qpos, pos, qsize, size))
    return out


def _mask_child(terms, mask: Val, q: Val) -> int:
    """An attention mask as a child of the attention term: whole along its key dim, and
    along every other dim where it is not held as the query is (broadcast from the right),
    so mask row i stays paired with query row i."""
    nd = len(q.vecs)
    m = layout.materialize(terms, mask, [len(mask.vecs) - 1])
    m = layout.materialize(terms, m, [d for d in range(len(m.vecs) - 1)
                                      if not layout.same_vec(m.vecs[d], q.vecs[d + nd - len(m.vecs)])])
    return m.t


_BUILT: WeakKeyDictionary = WeakKeyDictionary()  # term store -> sdpa operands -> pairings built over them


def _sdpa_scale(terms, q: Val, scale):
    """The scale attention applies, exactly: torch's default is ``1 / sqrt(head_dim)``
    computed in double precision (``sdp::calculate_scale``), the very value Python's
    ``1 / math.sqrt(d)`` gives, so an explicit scale equal to it is the same kernel call."""
    if scale is None:
        scale = 1.0 / math.sqrt(layout.shape_of(terms, q)[-1])
    return freeze(float(scale))


def _gqa_heads(terms, q: Val, kv: Val, nd: int) -> Val:
    """Grouped-query attention (fewer key/value heads than query heads, as torch's kernels take
    them): query head h reads key/value head h // g, i.e. the key/value heads repeated in place
    (``repeat_interleave``), a selection with repeated positions."""
    if nd < 3:
        return kv
    hq, hkv = (len(layout.vec_array(x.vecs[nd - 3], terms.shape(x.t)[nd - 3])) for x in (q, kv))
    if hq == hkv or hq % hkv:
        return kv
    return layout.take(terms, kv, nd - 3, np.repeat(np.arange(hkv), hq // hkv))


def _sdpa_rule(ctx: RuleCtx, q: Val, k: Val, v: Val, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None, **kw):
    """Attention is exact on any common selection of the batch/head dims, and on a
    selection of query rows unless a causal mask ties rows to absolute positions.

    One program's head positions may fit several pairings (a rank holding one query
    head fits a shift and any grouping): each is exact for the heads it holds, and a
    pairing the other program already built over the same operands is preferred, so
    both build the same term (as reshape prefers a split the other program built)."""
    terms = ctx.terms
    nd = len(q.vecs)
    k, v = (_gqa_heads(terms, q, kv, nd) for kv in (k, v))
    q = layout.materialize(terms, q, [nd - 1] + ([nd - 2] if is_causal else []))
    k = layout.materialize(terms, k, [nd - 2, nd - 1])
    v = layout.materialize(terms, v, [nd - 2, nd - 1])
    ops = [q, k, v]
    found = []
    for d in range(nd - 2):
        reused = earlier_selection(terms, ops, d)  # heads of one fused projection (sdpa_reuse.py)
        if reused is not None and _pairings(terms, reused, d) is not None:
            ops = reused
        pairings = _pairings(terms, ops, d)
        if pairings is None:
            mats = [layout.materialize(terms, o, [d]) for o in ops]
            record(terms, ops, mats, d)
            ops = mats
            pairings = _pairings(terms, ops, d)
        found.append(pairings)
    q, k, v = ops
    children = (q.t, k.t, v.t)
    if isinstance(attn_mask, Val):
        children += (_mask_child(terms, attn_mask, q),)
    base = (freeze(dropout_p), bool(is_causal), _sdpa_scale(terms, q, scale))
    built = _BUILT.setdefault(terms, {}).setdefault(base + children, [])
    shifts = next((b for b in built if all(_fits(p, *f[1:]) for dim, fs in zip(b, found) for p, f in zip(dim, fs))),
                  None)
    if shifts is None:
        shifts = tuple(tuple(f[0] for f in fs) for fs in found)
        built.append(shifts)
    attrs = base + (shifts,)
    qs = terms.shape(q.t)
    out = Val(terms.make("sdpa", attrs + (0,), children, qs[:-1] + (terms.shape(v.t)[-1],)), q.vecs[:-1] + (None,))
    lse = Val(terms.make("sdpa", attrs + (1,), children, qs[:-1]), q.vecs[:-1])
    return out, lse


declare((T + "_scaled_dot_product_flash_attention_for_cpu", T + "_scaled_dot_product_efficient_attention",
         T + "_scaled_dot_product_flash_attention"),
        numerics=_sdpa_num, rule=_sdpa_rule, doc="scaled dot-product attention (out, logsumexp)")
def _sdpa_backward_num(g, q, k, v, out, lse, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None, **kw):
    g, q, k, v = as_float(g), as_float(q), as_float(k), as_float(v)
    grouped = gqa_backward_num(_sdpa_backward_num, g, q, k, v, out, lse, dropout_p, is_causal, attn_mask, scale, **kw)
    if grouped is not None:  # grouped-query heads (ops/sdpa_gqa_backward.py)
        return grouped
    scores, s = _sdpa_scores(q, k, is_causal, attn_mask, scale)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    dv = np.matmul(np.swapaxes(p, -1, -2), g)
    dp = np.matmul(g, np.swapaxes(v, -1, -2))
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return np.matmul(ds, k) * s, np.matmul(np.swapaxes(ds, -1, -2), q) * s, dv


def _whole_groups(pairing: tuple, qpos: np.ndarray, pos: np.ndarray, qsize: int, size: int) -> bool:
    """Whether the q positions held include every q position paired with a held k/v
    position: the k/v gradient, a sum over those q positions, is then whole here."""
    if pairing[0] == "shift":
        return True
    paired = {int(p): [] for p in pos}
    for p in range(qsize):
        if pairing[0] == "group":
            kv = p * size // qsize
        else:
            kv = pairing[1] + p // pairing[2]
        if kv in paired:
            paired[kv].append(p)
    held_q = set(int(p) for p in qpos)
    return all(set(ps) <= held_q for ps in paired.values())


def _disjoint_heads(terms, q: Val, k: Val, v: Val) -> bool:
    """Whether q, k and v hold disjoint positions of one term (along some dim)."""
    shape = terms.shape(q.t)
    for d in range(len(shape)):
        sets = [set(layout.vec_array(x.vecs[d], shape[d]).tolist()) for x in (q, k, v)]
        if not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2]):
            return True
    return False


def _sdpa_backward_rule(ctx: RuleCtx, g: Val, q: Val, k: Val, v: Val, out: Val, lse: Val, dropout_p=0.0,
                        is_causal=False, attn_mask=None, scale=None, **kw):
    """Attention's backward, exact on the selections its forward is exact on (the same
    pairing of q heads with k/v heads): gradients of q rows and of k/v heads are whole when
    the rank holds every q head paired with its k/v heads (else they are partial: no rule).
    An explicit mask is one more child, held as the forward holds it (:func:`_mask_child`)."""
    if attn_mask is not None and not isinstance(attn_mask, Val):
        raise ValueError("attention backward with a constant mask has no rule")
    grouped = gqa_backward(_sdpa_backward_rule, _gqa_heads, ctx, g, q, k, v, out, lse, dropout_p, is_causal,
                           attn_mask, scale, **kw)
    if grouped is not None:  # grouped-query heads (ops/sdpa_gqa_backward.py)
        return grouped
    terms = ctx.terms
    nd = len(q.vecs)
    rows = [nd - 2] if is_causal else []
    q, g, out = (layout.materialize(terms, x, [nd - 1] + rows) for x in (q, g, out))
    lse = layout.materialize(terms, lse, [nd - 2] if is_causal else [])
    k = layout.materialize(terms, k, [nd - 2, nd - 1])
    v = layout.materialize(terms, v, [nd - 2, nd - 1])
    found = []
    # k/v expanded to q's heads (GQA's repeat): each copy has its own gradient, indexed like q
    repeated = [any(len(np.unique(p)) != len(p) for p in (layout.vec_array(x.vecs[d], terms.shape(x.t)[d])
                                                       for d in range(nd - 2))) for x in (k, v)]
    for d in range(nd - 2):
        reused = earlier_selection(terms, [q, k, v], d)  # the forward's selection of fused heads
        if reused is not None and _pairings(terms, reused, d) is not None:
            q, k, v = reused
        pairings = _pairings(terms, [q, k, v], d)
        if pairings is None or not all(_whole_groups(*f) for f, rep in zip(pairings, repeated) if not rep):
            raise ValueError("the ranks' q and k/v heads are not paired by a rule (or a k/v head's q heads are split)")
        qpos = layout.vec_array(q.vecs[d], terms.shape(q.t)[d])
        offsets = []
        for x in (g, out, lse):  # row-aligned with q: the same positions of their own terms, up to an offset
            pos = layout.vec_array(x.vecs[d], terms.shape(x.t)[d])
            if len(pos) != len(qpos) or len(set((pos - qpos).tolist())) > 1:
                raise ValueError("attention backward: the gradient, output and logsumexp are not held as the query is")
            offsets.append(int(pos[0] - qpos[0]) if len(pos) else 0)
        found.append(tuple(f[0] for f in pairings) + tuple(offsets))
    attrs = (freeze(dropout_p), bool(is_causal), _sdpa_scale(terms, q, scale), tuple(found))
    children = (g.t, q.t, k.t, v.t, out.t, lse.t) + ((_mask_child(terms, attn_mask, q),) if attn_mask is not None else ())
    if q.t == k.t == v.t and not any(repeated) and _disjoint_heads(terms, q, k, v):
        # q, k, v cut from one fused projection: one gradient of it, each cut where its operand was
        # (not when k/v are expanded to q's heads: each copy's gradient is its own, summed later)
        fused = terms.make("sdpa_backward", attrs + ("fused",), children, terms.shape(q.t))
        return tuple(Val(fused, x.vecs) for x in (q, k, v))
    def grad(i, x, per_copy):
        if not per_copy:
            return Val(terms.make("sdpa_backward", attrs + (i,), children, terms.shape(x.t)), x.vecs)
        shape = terms.shape(q.t)[:nd - 2] + terms.shape(x.t)[nd - 2:]
        return Val(terms.make("sdpa_backward", attrs + (i, "per_copy"), children, shape), q.vecs[:nd - 2] + x.vecs[nd - 2:])
    return tuple(grad(i, x, per_copy) for i, (x, per_copy) in enumerate(((q, False), (k, repeated[0]), (v, repeated[1]))))


declare(T + "_scaled_dot_product_flash_attention_for_cpu_backward", numerics=_sdpa_backward_num,
        rule=_sdpa_backward_rule, doc="scaled dot-product attention backward (grad q, k, v)")
declare(T + "scaled_dot_product_attention", numerics=lambda *a, **k: _sdpa_num(*a, **k)[0],
        rule=lambda ctx, *a, **k: _sdpa_rule(ctx, *a, **k)[0], doc="scaled dot-product attention")

# ------------------------------------------------------------------ creation


def _fill(ctx: RuleCtx, value, shape) -> Val:
    """A constant-filled tensor: an expanded scalar, so it broadcasts like one."""
    unit = ctx.terms.make("fill", (freeze(value),), (), (1,) * len(shape))
    return layout.expand(ctx.terms, layout.full(ctx.terms, unit), shape)


def _in_dtype(value, dtype):
    """The value a fill of `value` holds in `dtype` (a short name such as "i64"): integer
    dtypes truncate (``torch.full((2,), 1.5, dtype=torch.int64)`` holds 1), bool tests != 0."""
    dtype = str(dtype or "")
    if dtype.startswith(("i", "u")) and isinstance(value, (int, float)) and np.isfinite(value):
        return int(value)
    if dtype in ("b8", "bool") and isinstance(value, (int, float)):
        return bool(value)
    return value


def _creation(value_of):
    def rule(ctx: RuleCtx, *args, **kwargs):
        dtype = getattr(ctx.node.type, "dtype", None) if ctx.node is not None else None
        return _fill(ctx, _in_dtype(value_of(args, kwargs), dtype), ctx.out_shapes()[0])
    return rule


def _creation_like(value_of):
    """``zeros_like(x)`` and kin: the constant laid out as x is (a fill of x's term, at x's
    positions: exact, every element is the constant), so a scatter into it keeps x's columns."""
    plain = _creation(value_of)

    def rule(ctx: RuleCtx, x=None, *args, **kwargs):
        if not isinstance(x, Val) or tuple(shape_of(ctx.terms, x)) != tuple(ctx.out_shapes()[0]) \
                or (args and isinstance(args[0], (list, tuple))):
            return plain(ctx, x, *args, **kwargs)
        value = _in_dtype(value_of((x,) + args, kwargs), getattr(ctx.node.type, "dtype", None))
        return Val(ctx.terms.make("fill", (freeze(value),), (), ctx.terms.shape(x.t)), x.vecs)
    return rule


def _np_dtype_name(x) -> str:
    kind = np.asarray(x).dtype.kind
    return {"i": "i64", "u": "u8", "b": "b8"}.get(kind, "f64")


declare((T + "full",), numerics=lambda size, v, **k: np.full(size, _in_dtype(v, k.get("dtype")), dtype=np.float64),
        rule=_creation(lambda a, k: a[1]), doc="constant fill")
declare((T + "zeros",), numerics=lambda size, **k: np.zeros(size), rule=_creation(lambda a, k: 0), doc="zeros")
declare((T + "ones",), numerics=lambda size, **k: np.ones(size), rule=_creation(lambda a, k: 1), doc="ones")
declare((T + "zeros_like", T + "new_zeros"), numerics=lambda x, *a, **k: np.zeros(np.shape(x) if not a or not isinstance(a[0], (list, tuple)) else a[0]),
        rule=_creation_like(lambda a, k: 0), doc="zeros")
declare((T + "ones_like", T + "new_ones"), numerics=lambda x, *a, **k: np.ones(np.shape(x) if not a or not isinstance(a[0], (list, tuple)) else a[0]),
        rule=_creation(lambda a, k: 1), doc="ones")
declare((T + "full_like",), numerics=lambda x, v, **k: np.full(np.shape(x), _in_dtype(v, k.get("dtype") or _np_dtype_name(x)),
                                                            dtype=np.float64),
        rule=_creation(lambda a, k: a[1]), doc="constant fill")
declare(T + "scalar_tensor", numerics=lambda v, **k: np.asarray(v, dtype=np.float64),
        rule=_creation(lambda a, k: a[0]), doc="0-d constant")


def _arange_rule(ctx: RuleCtx, *args, **kwargs):
    s = ctx.out_shapes()[0]
    return Val(ctx.terms.make("arange", template(args, {}), (), s), (None,))


declare(T + "arange", numerics=lambda *a, **k: np.arange(*a, dtype=np.float64), rule=_arange_rule, doc="arange")


def _empty_rule(ctx: RuleCtx, *args, **kwargs):
    """Uninitialized memory carries no value: a fresh term that equals nothing."""
    s = ctx.out_shapes()[0]
    t = ctx.terms.make("empty", (ctx.rank, ctx.node.name, id(ctx.node)), (), s)
    return layout.full(ctx.terms, t)


declare((T + "empty", T + "empty_like", T + "new_empty", T + "empty_strided", T + "new_empty_strided"),
        numerics=lambda *a, **k: np.full(_empty_shape(a), np.nan), rule=_empty_rule, doc="uninitialized buffer")


def _empty_shape(a):
    """The size argument (the first list), else the shape of the tensor it is like."""
    sizes = [v for v in a if isinstance(v, (list, tuple))]
    return sizes[0] if sizes else (np.shape(a[0]) if a else ())


# aten.copy (copy_ converts src to dst's dtype): ops/casts.py

# ------------------------------------------------------------------ backward ops (joint fw+bw graphs)
#
# Gradients are built from the same helpers as the forward ops, so the same math gets the
# same term on both programs: a weight gradient is a reduction over the leading (token)
# dims of an elementwise term, so a rank holding some tokens gets a *partial* sum that an
# all_reduce completes; gradients of inputs are rowwise and follow any row selection.


def _gelu_backward_num(g, x, approximate="none"):
    g, x = as_float(g), as_float(x)
    if approximate == "tanh":
        k = np.sqrt(2 / np.pi)
        inner = k * (x + 0.044715 * x ** 3)
        t = np.tanh(inner)
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x))
    cdf = 0.5 * (1 + erf(x / np.sqrt(2)))
    pdf = np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
    return g * (cdf + x * pdf)


elementwise_op(T + "gelu_backward", _gelu_backward_num, doc="grad * gelu'(x)")
elementwise_op(T + "threshold_backward",
               lambda g, x, threshold: np.where(as_float(x) <= threshold, 0.0, as_float(g)),
               doc="grad where x > threshold, else 0 (relu backward)")
elementwise_op(T + "sigmoid_backward", lambda g, y: as_float(g) * as_float(y) * (1 - as_float(y)),
               doc="grad * y * (1 - y)")
elementwise_op(T + "tanh_backward", lambda g, y: as_float(g) * (1 - as_float(y) ** 2), doc="grad * (1 - y^2)")
elementwise_op(T + "silu_backward",
               lambda g, x: as_float(g) * (s := 1 / (1 + np.exp(-as_float(x)))) * (1 + as_float(x) * (1 - s)),
               doc="grad * silu'(x)")


def _softmax_backward_num(g, y, dim, *a):
    g, y = as_float(g), as_float(y)
    return y * (g - np.sum(g * y, axis=dim, keepdims=True))


def _log_softmax_backward_num(g, y, dim, *a):
    g, y = as_float(g), as_float(y)
    return g - np.exp(y) * np.sum(g, axis=dim, keepdims=True)


def _along_many(op, n_tensors):
    """Like :func:`_along` for ops over several operands normalized along one dim (the
    softmax backwards: grad and output): exact on any common selection of the other dims."""
    def rule(ctx: RuleCtx, *args):
        vals, dim = list(args[:n_tensors]), args[n_tensors]
        nd = len(vals[0].vecs)
        order = [d for d in range(nd) if d != dim % nd] + [dim % nd]
        moved = [layout.permute(ctx.terms, v, order) for v in vals]
        out = compute.rowwise(ctx.terms, op, (), moved, 1, [shape_of(ctx.terms, moved[0])])[0]
        back = list(range(nd - 1))
        back.insert(dim % nd, nd - 1)
        return layout.permute(ctx.terms, out, back)
    return rule


declare(T + "_softmax_backward_data", numerics=_softmax_backward_num, rule=_along_many("softmax_backward", 2),
        doc="softmax backward: y * (g - sum(g * y)) along a dim")
declare(T + "_log_softmax_backward_data", numerics=_log_softmax_backward_num,
        rule=_along_many("log_softmax_backward", 2), doc="log-softmax backward: g - exp(y) * sum(g) along a dim")


def layer_norm_backward_num(g, x, mean, rstd, w, b, ndims):
    """Reference layer-norm gradients (grad_input, grad_weight, grad_bias); `mean`/`rstd`
    broadcast against x's leading dims (keepdim shape)."""
    g, x = as_float(g), as_float(x)
    ax = tuple(range(x.ndim - ndims, x.ndim))
    lead = tuple(range(x.ndim - ndims))
    xhat = (x - mean) * rstd
    gw = g * as_float(w) if w is not None else g
    gi = rstd * (gw - np.mean(gw, axis=ax, keepdims=True) - xhat * np.mean(gw * xhat, axis=ax, keepdims=True))
    gweight = np.sum(g * xhat, axis=lead) if w is not None else None
    gbias = np.sum(g, axis=lead) if b is not None else None
    return gi, gweight, gbias


def layer_norm_backward_rule(ctx: RuleCtx, g: Val, x: Val, mean: Val, rstd: Val, w, b, ndims: int) -> tuple:
    """Layer-norm gradients as terms. `mean`/`rstd` are per-row statistics in keepdim shape
    (leading dims of x, then ones). grad_input is rowwise over the normalized dims (exact
    on any common row selection); grad_weight is ``sum_rows(g * (x - mean) * rstd)`` and
    grad_bias ``sum_rows(g)``: built with the aten sub/mul/sum rules, so a rank holding
    some rows gets a partial sum of the single-device gradient."""
    terms = ctx.terms
    operands = [g, x, mean, rstd] + ([w] if isinstance(w, Val) else [])
    gi = compute.rowwise(terms, "layer_norm_backward", (ndims, isinstance(w, Val)), operands, ndims,
                         [shape_of(terms, g)])[0]
    lead = list(range(len(x.vecs) - ndims))
    gw = gb = None
    if isinstance(w, Val):
        centered = compute.elementwise(terms, "sub", template((x, mean), {}), [x, mean])
        xhat = _mul_rule(ctx, centered, rstd)
        gw = _sum_rows(ctx, _mul_rule(ctx, g, xhat), lead)
    if isinstance(b, Val):
        gb = _sum_rows(ctx, g, lead)
    return gi, gw, gb


def _sum_rows(ctx: RuleCtx, v: Val, lead: list) -> Val:
    """The sum over the leading (row) dims; no rows (every dim normalized) is no sum, not
    aten.sum's empty dim list, which means every dim."""
    return _sum_rule(ctx, v, lead) if lead else v


def _native_ln_backward_num(g, x, shape, mean, rstd, w, b, mask=(True, True, True)):
    outs = layer_norm_backward_num(g, x, mean, rstd, w, b, len(shape))
    return tuple(o if m else None for o, m in zip(outs, mask))


def _native_ln_backward_rule(ctx: RuleCtx, g, x, shape, mean, rstd, w, b, mask=(True, True, True)):
    outs = layer_norm_backward_rule(ctx, g, x, mean, rstd, w, b, len(shape))
    return tuple(o if m else None for o, m in zip(outs, mask))


declare(T + "native_layer_norm_backward", numerics=_native_ln_backward_num, rule=_native_ln_backward_rule,
        doc="layer norm backward (grad_input, grad_weight, grad_bias)")


# one-hot rows: ``onehot(idx, n)[..., j] = (idx[...] == j)``; a scatter of one value per
# row is ``x + delta * onehot``, and an embedding's weight gradient is the contraction of
# ``onehot(ids)`` with the output gradient over the token dims (a partial sum per token shard).

def onehot(ctx: RuleCtx, idx: Val, n: int) -> Val:
    t = ctx.terms.make("onehot", (int(n),), (idx.t,), ctx.terms.shape(idx.t) + (int(n),))
    return Val(t, idx.vecs + (None,))


def _fold_selected(ctx: RuleCtx, idx: Val, cols, size: int):
    """Positions `cols[idx]` of a dim of `size` for indices `idx` into the selection
    `cols` (None: the whole dim), with a one-hot over the whole dim; None when `cols` is
    not a contiguous block (no exact term for it here)."""
    if cols is None:
        return idx
    cols = np.asarray(cols)
    lo = int(cols[0]) if len(cols) else 0
    if not len(cols) or not np.array_equal(cols, np.arange(lo, lo + len(cols))):
        return None
    return idx if lo == 0 else compute.elementwise(ctx.terms, "add_const", (freeze(lo),), [idx])


def _masked_ids(ctx: RuleCtx, idx: Val, lo=None, hi=None):
    """If `idx` is Megatron's masked local index ``where(ids < lo | ids >= hi, c, ids - lo)``
    (any fill c in the masked branch; seen through a reshape), ``(ids, ids_term, lo, hi)``:
    ``ids`` a Val of the ids at idx's positions, ``ids_term`` the term inside the mask;
    else None. `lo`/`hi` given: they must be these."""
    from ..algebra.lemmas import OUTSIDE
    from ..algebra.patterns import Const, P, V, first_match
    fill_first = lambda a: a != "$"  # noqa: E731  (where(m, c, x): the constant is the masked branch)
    base = {k: v for k, v in (("lo", lo), ("hi", hi)) if v is not None}
    for local in (P("sub", V("ids"), _1=Const("lo")), V("ids")):  # ids - lo, or ids itself when lo is 0
        env = base
        if not isinstance(local, P):
            if base.get("lo", 0) != 0:
                continue
            env = {**base, "lo": 0}
        for pat in (P("where", OUTSIDE, local, _1=fill_first), P("where", OUTSIDE, V("fill"), local)):
            found = first_match(ctx.terms, idx.t, [pat, P("reshape", pat)], env)
            if found is None or not all(isinstance(found[k], int) for k in ("lo", "hi")):
                continue
            shape = ctx.terms.shape(idx.t)
            ids = layout.view_term(ctx.terms, "reshape", (shape,), found["ids"], shape)
            return Val(ids, idx.vecs), found["ids"], found["lo"], found["hi"]
    return None


def _is_outside(terms, t: int, ids: int, lo: int, hi: int, shape) -> bool:
    """Whether `t` is the mask ``ids < lo | ids >= hi`` of the ids term `ids`, or a reshape of
    it to `shape` (as a float: casts are value-preserving)."""
    from ..algebra.lemmas import OUTSIDE
    from ..algebra.patterns import match
    if terms.shape(t) != tuple(shape):
        return False
    if terms[t].op == "reshape":
        t = terms[t].children[0]
    return match(terms, t, OUTSIDE, {"ids": ids, "lo": lo, "hi": hi}) is not None


def _in_range_scale(terms, delta: int, ids: int, lo: int, hi: int):
    """c when `delta` is ``c * (1 - m)`` with m the mask ``ids < lo | ids >= hi`` viewed at
    delta's shape (as the cross-entropy backward builds it); else None."""
    from ..algebra.lemmas import linear_parts
    shape = terms.shape(delta)
    parts = linear_parts(terms, delta)
    if len(parts) != 1:
        return None
    (part, c), = parts.items()
    one_minus = terms[part]
    if one_minus.op != "add_const" or one_minus.attrs[0] != 1 or one_minus.shape != shape:
        return None
    inner = linear_parts(terms, one_minus.children[0])
    if len(inner) != 1 or next(iter(inner.values())) != -1:
        return None
    return c if _is_outside(terms, next(iter(inner)), ids, lo, hi, shape) else None


def _put_along_rows(ctx: RuleCtx, x: Val, idx: Val, v: Val) -> Val:
    """``x[arange(n), idx] = v`` on a 2-D x: ``x + (v - x[i, idx_i]) * onehot(idx)``, with the
    one-hot over x's whole column dim at the selected columns (exact: the columns of a
    selection are distinct, so ``cols[j] == cols[idx_i]`` iff ``j == idx_i``).

    Megatron's vocab-parallel cross-entropy backward writes through a masked local index
    (rows whose target is outside the rank's columns [lo, hi) write their own value back at
    a fill position: ``delta = c * (1 - mask)``). Then ``(1 - mask) * onehot(lo + idx)`` on
    columns [lo, hi) is ``onehot(ids)`` there, for any fill: the term of the unmasked scatter."""
    terms = ctx.terms
    size = terms.shape(x.t)[1]
    cols = x.vecs[1]
    picked = _take_along(ctx, x, idx, 1)
    delta = compute.elementwise(terms, "sub", template((v, picked), {}), [v, picked])
    gidx = _fold_selected(ctx, idx, cols, size)
    if gidx is None:
        return _opaque("index_put")(ctx, x, [None, idx], v, False)
    lo, hi = (0, size) if cols is None else (int(cols[0]), int(cols[0]) + len(cols))
    masked = _masked_ids(ctx, idx, lo, hi)
    aligned = terms.shape(delta.t) == terms.shape(idx.t) and all(
        layout.same_vec(a, b) for a, b in zip(delta.vecs, idx.vecs))
    c = _in_range_scale(terms, delta.t, masked[1], lo, hi) if masked is not None and aligned else None
    if c is not None:
        hot = onehot(ctx, masked[0], size)
        hot = Val(hot.t, hot.vecs[:-1] + (cols,))
        return compute.elementwise(terms, "add", (), [x, _scaled(ctx, hot, c)], commutative=True)
    hot = onehot(ctx, gidx, size)
    hot = Val(hot.t, hot.vecs[:-1] + (cols,))
    step = compute.elementwise(terms, "mul", (), [layout.unsqueeze(terms, delta, -1), hot], commutative=True)
    return compute.elementwise(terms, "add", (), [x, step], commutative=True)


def _nll_backward_num(g, logp, target, weight=None, reduction=1, ignore_index=-100, total_weight=None):
    logp = as_float(logp)
    t = np.asarray(target, dtype=np.int64)
    out = np.zeros_like(logp)
    scale = -as_float(g) / (as_float(total_weight) if reduction == 1 else 1.0)
    scale = np.broadcast_to(scale, t.shape) * (t != ignore_index)
    np.put_along_axis(out, np.where(t != ignore_index, t, 0)[..., None], scale[..., None], axis=-1)
    return out


def _nll_backward_rule(ctx: RuleCtx, g, logp: Val, target: Val, weight=None, reduction=1, ignore_index=-100,
                       total_weight=None):
    """``-g (/ total_weight) * onehot(target)`` over the class dim (targets valid, stated)."""
    if weight is not None:
        raise ValueError("nll_loss_backward with class weights has no rule")
    nd = len(logp.vecs)
    logp = layout.materialize(ctx.terms, logp, [nd - 1])
    scale = _div_rule(ctx, g, total_weight) if reduction == 1 else g
    scale = _scaled(ctx, scale, -1)
    if reduction != 0:
        scale = layout.expand(ctx.terms, scale, shape_of(ctx.terms, target))
    hot = onehot(ctx, target, ctx.terms.shape(logp.t)[-1])
    return compute.elementwise(ctx.terms, "mul", (), [layout.unsqueeze(ctx.terms, scale, -1), hot],
                               commutative=True)


declare(T + "nll_loss_backward", numerics=_nll_backward_num, rule=_nll_backward_rule,
        doc="nll loss backward: -g/total at each row's target (targets valid)")


def _embedding_backward_num(g, ids, num_weights, padding_idx=-1, scale_grad_by_freq=False):
    g = as_float(g)
    ids = np.asarray(ids, dtype=np.int64)
    out = np.zeros((num_weights,) + g.shape[ids.ndim:])
    np.add.at(out, ids, g)
    if padding_idx is not None and padding_idx >= 0:
        out[padding_idx] = 0
    return out


def _unmasked_grad(ctx: RuleCtx, g: Val, ids: int, lo: int, hi: int):
    """g's term without Megatron's zeroing of masked token rows ``where(m, 0, g)``, m the
    mask ``ids < lo | ids >= hi`` over g's leading (token) dims; else None."""
    terms = ctx.terms
    t = terms[g.t]
    if t.op != "where" or len(t.children) != 2 or t.attrs[1] != 0 or t.attrs[2] != "$":
        return None
    mask, inner = t.children
    tokens = terms.shape(ids)
    if terms.shape(inner) != t.shape or t.shape[:len(tokens)] != tokens:
        return None
    if not _is_outside(terms, mask, ids, lo, hi, tokens + (1,) * (len(t.shape) - len(tokens))):
        return None
    return Val(inner, g.vecs)


def _table_size(terms, ids: int, block: int, hi: int, world: int) -> int:
    """The vocabulary the ranks' blocks of `block` rows tile: the size of a one-hot over the
    same ids the other program built (its table; on a dp x tp mesh the vocabulary is split
    over a tp group smaller than the world), else the even split over the world's ranks.
    Rows [lo, hi) of the scatter are the same for every size >= hi."""
    for n in range(-(-hi // max(block, 1)), world + 1):
        if terms.lookup("onehot", (n * block,), (ids,)) is not None:
            return n * block
    return world * block


def _embedding_backward_rule(ctx: RuleCtx, g: Val, ids: Val, num_weights, padding_idx=-1,
                             scale_grad_by_freq=False):
    """``dW = onehot(ids)ᵀ · g`` contracted over the token dims (a partial sum when the
    tokens are split across ranks).

    Megatron's vocab-parallel embedding backward looks up local rows ``idx = where(m, c,
    ids - lo)`` with the masked token rows of g zeroed (m = ``ids < lo | ids >= hi``): then
    ``onehot(idx, hi - lo)ᵀ · where(m, 0, g)`` is rows [lo, hi) of ``onehot(ids, V)ᵀ · g``
    for every V >= hi. The table size V is taken as the even split over the world's ranks
    (hi - lo rows each, lo a multiple of it); another table size only fails to match.

    A ``padding_idx`` p (ids not masked): the one-hot with column p zeroed, so row p of the
    gradient is zero (``onehot_pad``: a term of the ids, the table size and p)."""
    pad = padding_idx is not None and padding_idx >= 0
    if scale_grad_by_freq:
        raise ValueError("embedding_dense_backward with scale_grad_by_freq has no rule")
    terms = ctx.terms
    k = len(ids.vecs)
    size, rows = int(num_weights), None
    masked = _masked_ids(ctx, ids)
    if pad and masked is not None:
        raise ValueError("embedding_dense_backward with padding_idx over masked local ids has no rule")
    if pad:
        hot = Val(terms.make("onehot_pad", (size, int(padding_idx)), (ids.t,), terms.shape(ids.t) + (size,)),
                  ids.vecs + (None,))
        return compute.dot(terms, hot, g, (), (), tuple(range(k)), tuple(range(k)))
    if masked is not None and masked[3] - masked[2] == size and masked[2] % max(size, 1) == 0 \
            and terms.shape(masked[1]) == terms.shape(ids.t):
        local_ids, raw, lo, hi = masked
        plain = _unmasked_grad(ctx, g, raw, lo, hi)
        total = _table_size(terms, local_ids.t, size, hi, ctx.world_size)
        if plain is not None and hi <= total:
            ids, g = local_ids, plain
            rows = None if (lo, hi) == (0, total) else np.arange(lo, hi, dtype=np.int64)
            size = total
    block = clamped_block(terms, ids.t, g.t, size) if masked is None and not pad else None
    if block is not None and all(v is None for v in ids.vecs) and all(v is None for v in g.vecs):
        raw, plain, lo, hi = block  # clamp-and-mask local ids (ops/embedding_clamped.py)
        total = _table_size(terms, raw, size, hi, ctx.world_size)
        if hi <= total:
            ids, g, size = Val(raw, ids.vecs), Val(plain, g.vecs), total
            rows = None if (lo, hi) == (0, total) else np.arange(lo, hi, dtype=np.int64)
    hot = onehot(ctx, ids, size)
    out = compute.dot(terms, hot, g, (), (), tuple(range(k)), tuple(range(k)))
    return out if rows is None else Val(out.t, (rows,) + out.vecs[1:])


declare(T + "embedding_dense_backward", numerics=_embedding_backward_num, rule=_embedding_backward_rule,
        doc="embedding weight gradient: scatter-add of grad rows into table rows")
