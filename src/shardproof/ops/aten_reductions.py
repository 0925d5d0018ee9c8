"""ATen reductions beyond sum/mean/amax (ops/aten_rows.py): min(dim), argmin, prod, std,
logsumexp, linalg_vector_norm (so clip_grad_norm_ and F.normalize) and mse_loss.

Reductions that a collective cannot complete from partial results are materialized over
the reduced dims (a sharded reduced dim: unknown); numerics are torch's own kernels."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..algebra import compute
from ..algebra.layout import Val, prod as size_of, shape_of
from ..algebra.terms import freeze
from .aten_misc import torch_kernel
from .common import as_float, template
from .registry import RuleCtx, declare

T = "aten."


def _dims(nd: int, dim) -> list[int]:
    if dim is None or dim == [] or dim == ():
        return list(range(nd))
    return [d % nd for d in ([dim] if isinstance(dim, int) else dim)]


def _np_dims(x, dim):
    return tuple(_dims(np.ndim(x), dim))


def reduce_whole(ctx: RuleCtx, op: str, attrs: tuple, x: Val, dim=None, keepdim=False) -> Val:
    """A reduction over `dim` (all dims when None) that needs the whole reduced dims."""
    return compute.reduction(ctx.terms, op, attrs, x, _dims(len(x.vecs), dim), keepdim, combinable=False)


def _min_rule(ctx: RuleCtx, x: Val, dim=None, keepdim=False):
    dims = _dims(len(x.vecs), dim)
    vals = compute.reduction(ctx.terms, "amin", (), x, dims, keepdim, combinable=True)
    if dim is None:
        return vals
    return vals, compute.reduction(ctx.terms, "argmin", (), x, dims, keepdim, combinable=False)


declare(T + "min", numerics=torch_kernel("min"), rule=_min_rule, doc="min (values, indices along a dim)")
declare(T + "argmin", numerics=torch_kernel("argmin"),
        rule=lambda ctx, x, dim=None, keepdim=False: compute.reduction(
            ctx.terms, "argmin", (), x, _dims(len(x.vecs), dim), keepdim, combinable=False),
        doc="argmin (not combinable across shards)")


def _prod_rule(ctx: RuleCtx, x: Val, dim=None, keepdim=False, dtype=None):
    return reduce_whole(ctx, "prod", (), x, dim, keepdim)


declare(T + "prod", numerics=torch_kernel("prod", lambda x, dim=None, keepdim=False: np.prod(
            x, axis=_np_dims(x, dim), keepdims=keepdim)),
        rule=_prod_rule, doc="product over dims (over a sharded dim: unknown)")


def _std_rule(ctx: RuleCtx, x: Val, dim=None, correction=1, keepdim=False):
    return reduce_whole(ctx, "std", (freeze(correction),), x, dim, keepdim)


def _std_num(x, dim=None, correction=1, keepdim=False):
    return np.std(as_float(x), axis=_np_dims(x, dim), ddof=correction, keepdims=keepdim)


declare(T + "std", numerics=_std_num, rule=_std_rule, doc="standard deviation")


def _logsumexp_rule(ctx: RuleCtx, x: Val, dim, keepdim=False):
    return reduce_whole(ctx, "logsumexp", (), x, dim, keepdim)


declare(T + "logsumexp", numerics=torch_kernel("logsumexp"), rule=_logsumexp_rule,
        doc="log(sum(exp(x))) over dims (over a sharded dim: unknown)")


def _norm_rule(ctx: RuleCtx, x: Val, ord=2, dim=None, keepdim=False, dtype=None):
    return reduce_whole(ctx, "vector_norm", (freeze(float(ord)),), x, dim, keepdim)


declare(T + "linalg_vector_norm", numerics=torch_kernel("linalg_vector_norm"), rule=_norm_rule,
        doc="the ord-norm over dims (clip_grad_norm_, F.normalize)")


def _mse_rule(ctx: RuleCtx, a, b, reduction=1):
    """(a - b)^2, then its sum (reduction 2) or mean (1): a sum over a sharded dim is a
    partial sum that an all_reduce completes."""
    terms = ctx.terms
    if not (isinstance(a, Val) and isinstance(b, Val)):
        raise ValueError("mse_loss of a constant: no rule")
    diff = compute.elementwise(terms, "sub", template((a, b), {}), [a, b])
    sq = compute.elementwise(terms, "square", template((diff,), {}), [diff])
    if reduction == 0:
        return sq
    total = compute.reduction(terms, "sum", (), sq, list(range(len(sq.vecs))), False, combinable=True)
    if reduction == 2:
        return total
    n = size_of(shape_of(terms, sq))
    if n == 0:  # the mean of nothing is nan
        return Val(terms.make("mean_of_empty", (), (total.t,), ()), ())
    return Val(compute.scale(terms, total.t, Fraction(1, n)), total.vecs)


declare(T + "mse_loss", numerics=torch_kernel("mse_loss"), rule=_mse_rule,
        doc="mean (or sum, or none) of squared differences")
