"""ATen backward ops of joint fw+bw graphs (gelu, softmax, layer norm, nll, embedding)."""
from __future__ import annotations

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val, shape_of
from .common import as_float, elementwise_op, erf, template
from .registry import RuleCtx, declare
from .aten import _div_rule, _mul_rule, _scaled
from .aten_index import _is_outside, _masked_ids, onehot
from .aten_rows import _sum_rule
from .embedding_clamped import clamped_block

T = "aten."

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
