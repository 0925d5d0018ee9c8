"""ATen reductions, row-wise ops (softmax, norms) and contractions (mm, addmm, linear)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val, prod, shape_of
from ..algebra.ranks import LINEARITY
from ..algebra.terms import freeze
from .common import as_float, template
from .pairing import paired_dot
from .registry import RuleCtx, declare
from .aten import _scaled

T = "aten."

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


def layer_norm_num(x, shape, w=None, b=None, eps=1e-5):
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


declare(T + "native_layer_norm", numerics=layer_norm_num, rule=_norm_rule("layer_norm", 3),
        doc="layer norm over the trailing dims (out, mean, rstd)")
declare(T + "layer_norm", numerics=lambda x, shape, w=None, b=None, eps=1e-5, *a: layer_norm_num(x, shape, w, b, eps)[0],
        rule=_norm_rule("layer_norm", 1), doc="layer norm")


def rms_norm_num(x, shape, w=None, eps=None):
    x = as_float(x)
    ax = tuple(range(np.ndim(x) - len(shape), np.ndim(x)))
    eps = np.finfo(np.float32).eps if eps is None else eps
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=ax, keepdims=True) + eps)
    y = x * rstd
    return (y * w if w is not None else y), rstd


declare(T + "_fused_rms_norm", numerics=rms_norm_num, rule=_norm_rule("rms_norm", 2), doc="RMS norm (out, rstd)")
declare(T + "rms_norm", numerics=lambda *a, **k: rms_norm_num(*a, **k)[0], rule=_norm_rule("rms_norm", 1),
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
