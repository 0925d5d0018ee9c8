"""ATen embedding, indexing (index, gather, nll) and creation ops (full, zeros, arange, empty)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val, prod, shape_of
from ..algebra.terms import freeze
from .common import as_float, template, tensor_args
from .registry import RuleCtx, declare
from .aten import _scaled

T = "aten."

# ------------------------------------------------------------------ embedding and indexing


def embedding_rule(ctx: RuleCtx, w: Val, ids: Val, *a):
    w = layout.materialize(ctx.terms, w, [0])
    tshape = ctx.terms.shape(ids.t) + (ctx.terms.shape(w.t)[1],)
    t = ctx.terms.make("embedding", (), (w.t, ids.t), tshape)
    return Val(t, ids.vecs + (w.vecs[1],))


declare(T + "embedding", numerics=lambda w, ids, *a: as_float(w)[np.asarray(ids, dtype=np.int64)],
        rule=embedding_rule, doc="row lookup; rows selected by the ids' layout")


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
        return embedding_rule(ctx, x, indices[0])  # table[ids] is a lookup of rows (of a 2-D table)
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


def _index_select_rule(ctx: RuleCtx, x: Val, dim, idx: Val):
    """index_select by an input-free index table (built from aranges): its values are computed
    exactly, and the op is the selection of those positions; any other index stays opaque."""
    from ..algebra.softmax_rows import const_value
    d = dim % len(x.vecs)
    table = const_value(ctx.terms, idx.t) if isinstance(idx, Val) and len(idx.vecs) == 1 else None
    if table is not None:
        table = np.asarray(table)[layout.vec_array(idx.vecs[0], ctx.terms.shape(idx.t)[0])]
    n = shape_of(ctx.terms, x)[d]
    if table is None or not np.all(np.isfinite(table)) or not np.array_equal(table, np.round(table)) \
            or (len(table) and (table.min() < 0 or table.max() >= n)):
        return _opaque("index_select")(ctx, x, dim, idx)
    return layout.take(ctx.terms, x, d, table.astype(np.int64))


declare(T + "index_select", numerics=lambda x, dim, idx: np.take(x, np.asarray(idx, dtype=np.int64), axis=dim),
        rule=_index_select_rule, doc="index_select (a selection where the index table is input-free)")


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
