"""XLA ops with no ATen op of the same meaning, declared once each (shape of the
arguments, numpy numerics, relation rule side by side). The HLO and StableHLO importers
map everything else (elementwise arithmetic, compare, select, reshape, transpose,
concatenate, all-reduce) onto the ATen/c10d ops; see :mod:`shardproof.frontends.hlo_text`.

``custom_call.<target>`` ops are the plug-in point for XLA custom calls: declare the name
of a target (as below for AWS Neuron's) to support it.
"""
from __future__ import annotations

import math

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val, shape_of
from ..algebra.masks import make_fill
from ..algebra.ranks import combine
from ..algebra.terms import freeze
from .aten_index import _fill
from .casts import convert, preserves
from .collectives import _reduce_np
from .common import as_float, template
from .pairing import paired_dot
from .registry import RuleCtx, declare

X = "xla."

# ------------------------------------------------------------------ values and views



def _convert_num(x, dtype):
    return convert(x, dtype)


def _convert_rule(ctx: RuleCtx, x: Val, dtype):
    """As aten's casts (ops/casts.py): the identity where the target holds every value of the
    source, else the elementwise term ``cast[dtype](x)``."""
    src = getattr(getattr(ctx.node.args[0], "type", None), "dtype", None)
    if src is not None and preserves(src, dtype):
        return x
    return compute.elementwise(ctx.terms, "cast", (dtype,), [x])


declare(X + "convert", numerics=_convert_num, rule=_convert_rule, shape=lambda x, dtype: x,
        doc="element type conversion (as aten casts: value-preserving ones are the identity)")


def _broadcast_num(x, shape, dims):
    x = np.asarray(x)
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order) if x.ndim else x
    full = [1] * len(shape)
    for i, d in enumerate(sorted(dims)):
        full[d] = x.shape[i]
    return np.broadcast_to(x.reshape(full), shape).copy()


def _broadcast_rule(ctx: RuleCtx, x: Val, shape, dims):
    """broadcast_in_dim: operand dim i becomes output dim dims[i]; a permutation, unit
    dims inserted, then an expansion (all views: the layout follows)."""
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    if order != list(range(len(dims))):
        x = layout.permute(ctx.terms, x, order)
    kept = set(dims)
    for d in range(len(shape)):
        if d not in kept:
            x = layout.unsqueeze(ctx.terms, x, d)
    return layout.expand(ctx.terms, x, shape)


declare(X + "broadcast_in_dim", numerics=_broadcast_num, rule=_broadcast_rule,
        doc="broadcast: operand dims to the given output dims, the others repeated")


def _slice_num(x, starts, limits, strides):
    return np.asarray(x)[tuple(slice(a, b, s) for a, b, s in zip(starts, limits, strides))]


def _slice_rule(ctx: RuleCtx, x: Val, starts, limits, strides):
    for d, (a, b, s) in enumerate(zip(starts, limits, strides)):
        if (a, b, s) != (0, shape_of(ctx.terms, x)[d], 1):
            x = layout.slice_(ctx.terms, x, d, a, b, s)
    return x


declare(X + "slice", numerics=_slice_num, rule=_slice_rule, doc="static slice [start:limit:stride] per dim")


def _padding(config: str, nd: int) -> list[tuple[int, int, int]]:
    """HLO ``padding=lo_hi[_interior]x...``: (low, high, interior) per dim."""
    dims = [tuple(int(v) for v in d.split("_")) for d in config.split("x")] if config else []
    if len(dims) != nd or any(len(d) not in (2, 3) for d in dims):
        raise ValueError(f"padding {config!r} does not give low_high[_interior] for each of {nd} dims")
    return [(d[0], d[1], d[2] if len(d) == 3 else 0) for d in dims]


def _pad_num(x, value, config):
    x = np.asarray(x)
    for d, (lo, hi, interior) in enumerate(_padding(config, x.ndim)):
        if interior:
            raise ValueError("interior padding has no numerics")
        x = x[(slice(None),) * d + (slice(max(0, -lo), x.shape[d] - max(0, -hi)),)]
        fill = [(max(0, lo), max(0, hi)) if e == d else (0, 0) for e in range(x.ndim)]
        x = np.pad(x, fill, constant_values=np.asarray(value).item())
    return x


def _pad_rule(ctx: RuleCtx, x: Val, value: Val, config):
    """Edge padding is a concatenation with constant blocks (negative padding: a slice);
    interior padding has no rule."""
    fill = layout.scalar_value(ctx.terms, value)
    if fill is None:
        raise ValueError("pad with a value that is not a constant has no rule")
    for d, (lo, hi, interior) in enumerate(_padding(config, len(x.vecs))):
        if interior:
            raise ValueError("interior padding has no rule")
        size = shape_of(ctx.terms, x)[d]
        if lo < 0 or hi < 0:
            x = layout.slice_(ctx.terms, x, d, max(0, -lo), size - max(0, -hi), 1)
        pieces = []
        for width in (max(0, lo), None, max(0, hi)):
            if width is None:
                pieces.append(x)
            elif width:  # a constant block laid out like x on the other dims (a constant holds on any piece)
                shape = list(ctx.terms.shape(x.t))
                shape[d] = width
                block = make_fill(ctx.terms, freeze(fill), shape)
                pieces.append(Val(block, tuple(None if e == d else v for e, v in enumerate(x.vecs))))
        x = layout.concat(ctx.terms, pieces, d) if len(pieces) > 1 else x
    return x


declare(X + "pad", numerics=_pad_num, rule=_pad_rule, doc="pad with a constant (edge padding; interior: no rule)")


def _known_ints(ctx: RuleCtx, vals) -> list[int] | None:
    out = []
    for v in vals:
        value = layout.scalar_value(ctx.terms, v) if isinstance(v, Val) else v
        if value is None or isinstance(value, bool):
            return None
        out.append(int(value))
    return out


def _clamped_starts(starts, sizes, shape):
    """XLA clamps dynamic starts so that the window stays inside the operand."""
    return [max(0, min(int(s), n - k)) for s, k, n in zip(starts, sizes, shape)]


def _dynamic_slice_num(x, starts, sizes):
    x = np.asarray(x)
    lo = _clamped_starts([np.asarray(s).item() for s in starts], sizes, x.shape)
    return x[tuple(slice(a, a + k) for a, k in zip(lo, sizes))]


def _dynamic_slice_rule(ctx: RuleCtx, x: Val, starts, sizes):
    """With known starts a slice; else an exact term over the window dims (the others
    keep their selection)."""
    shape = shape_of(ctx.terms, x)
    known = _known_ints(ctx, starts)
    if known is not None:
        lo = _clamped_starts(known, sizes, shape)
        return _slice_rule(ctx, x, lo, [a + k for a, k in zip(lo, sizes)], [1] * len(sizes))
    windowed = [d for d in range(len(shape)) if sizes[d] != shape[d]]
    x = layout.materialize(ctx.terms, x, windowed)
    starts = [layout.materialize(ctx.terms, s) for s in starts]
    tshape = [sizes[d] if d in windowed else ctx.terms.shape(x.t)[d] for d in range(len(shape))]
    t = ctx.terms.make("dynamic_slice", (tuple(sizes),), (x.t,) + tuple(s.t for s in starts), tshape)
    return Val(t, tuple(None if d in windowed else x.vecs[d] for d in range(len(shape))))


declare(X + "dynamic_slice", numerics=_dynamic_slice_num, rule=_dynamic_slice_rule,
        doc="slice at run-time starts (clamped into range)")


def _dus_num(x, update, starts):
    out = as_float(x).copy() if np.asarray(x).dtype.kind == "f" else np.asarray(x).copy()
    update = np.asarray(update)
    lo = _clamped_starts([np.asarray(s).item() for s in starts], update.shape, out.shape)
    out[tuple(slice(a, a + k) for a, k in zip(lo, update.shape))] = update
    return out


def _dus_rule(ctx: RuleCtx, x: Val, update: Val, starts):
    """With known starts, writing a block that spans all but one dim is the concatenation
    of the kept pieces around it; otherwise an exact term of the whole tensors."""
    shape, ushape = shape_of(ctx.terms, x), shape_of(ctx.terms, update)
    known = _known_ints(ctx, starts)
    partial_dims = [d for d in range(len(shape)) if ushape[d] != shape[d]]
    if known is not None and len(partial_dims) <= 1:
        if not partial_dims:
            return update
        d = partial_dims[0]
        lo = _clamped_starts(known, ushape, shape)[d]
        pieces = ([layout.slice_(ctx.terms, x, d, 0, lo)] if lo else []) + [update]
        if lo + ushape[d] < shape[d]:
            pieces.append(layout.slice_(ctx.terms, x, d, lo + ushape[d], shape[d]))
        return layout.concat(ctx.terms, pieces, d) if len(pieces) > 1 else update
    vals = [layout.materialize(ctx.terms, v) for v in [x, update] + list(starts)]
    t = ctx.terms.make("dynamic_update_slice", (), tuple(v.t for v in vals), shape)
    return layout.full(ctx.terms, t)


declare(X + "dynamic_update_slice", numerics=_dus_num, rule=_dus_rule,
        doc="write a block at run-time starts (clamped into range)")


def _iota_num(shape, dim):
    return np.broadcast_to(np.arange(shape[dim]).reshape([-1 if d == dim else 1 for d in range(len(shape))]),
                           shape).astype(np.int64)


declare(X + "iota", numerics=_iota_num,
        rule=lambda ctx, shape, dim: layout.full(ctx.terms, ctx.terms.make("iota", (int(dim),), (), shape)),
        doc="positions along one dim")

# ------------------------------------------------------------------ contraction


def _dot_num(a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract):
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    a, b = as_float(a), as_float(b)
    la = [None] * a.ndim
    lb = [None] * b.ndim
    for i, j in list(zip(lhs_batch, rhs_batch)) + list(zip(lhs_contract, rhs_contract)):
        la[i] = lb[j] = next(letters)
    la = [c or next(letters) for c in la]
    lb = [c or next(letters) for c in lb]
    out = [la[i] for i in lhs_batch] + [c for d, c in enumerate(la) if d not in lhs_batch and d not in lhs_contract] \
        + [c for d, c in enumerate(lb) if d not in rhs_batch and d not in rhs_contract]
    return np.einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


def _dot_rule(ctx: RuleCtx, a: Val, b: Val, lhs_batch, rhs_batch, lhs_contract, rhs_contract):
    """dot_general (the block-matrix lemma of :func:`compute.dot`; batch dims paired by
    :func:`shardproof.ops.pairing.paired_dot`)."""
    return paired_dot(ctx.terms, a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract)


declare(X + "dot_general", numerics=_dot_num, rule=_dot_rule,
        doc="dot_general: batch, lhs free, rhs free dims; contraction over paired dims")

# ------------------------------------------------------------------ reductions

_REDUCE_TERMS = {"sum": "sum", "max": "amax", "min": "amin"}
_IDENTITY = {"sum": 0, "max": -math.inf, "min": math.inf, "prod": 1}


def _reduce_num(x, init, dims, kind):
    x = np.asarray(x)
    axis = tuple(dims)
    init = np.asarray(init)
    if kind == "sum":
        return np.sum(as_float(x), axis=axis) + init
    if kind == "prod":
        return np.prod(as_float(x), axis=axis) * init
    if kind in ("max", "min"):
        fn = np.maximum if kind == "max" else np.minimum
        red = (np.max if kind == "max" else np.min)(x, axis=axis) if x.size else np.full(
            [s for d, s in enumerate(x.shape) if d not in axis], init)
        return fn(red, init)
    return (np.all if kind == "and" else np.any)(x, axis=axis) & init if kind == "and" else np.any(x, axis=axis) | init


def _reduce_rule(ctx: RuleCtx, x: Val, init, dims, kind):
    """sum/max/min over dims (over a selected subset: a partial the collectives complete),
    combined with the init value unless it is the reduction's identity."""
    if kind not in _REDUCE_TERMS:
        raise ValueError(f"reduce with a {kind} reducer has no rule")
    # over no dims the reduce only combines with init (compute.reduction reads [] as every dim)
    out = compute.reduction(ctx.terms, _REDUCE_TERMS[kind], (), x, list(dims), False, combinable=True) if list(dims) \
        else x
    value = layout.scalar_value(ctx.terms, init) if isinstance(init, Val) else init
    if value is not None and value == _IDENTITY[kind]:
        return out
    if kind == "sum" and value is not None:
        return compute.elementwise(ctx.terms, "add_const", (freeze(value),), [out])
    op = {"sum": "add", "max": "maximum", "min": "minimum"}[kind]
    return compute.elementwise(ctx.terms, op, (), [out, init], commutative=True)


declare(X + "reduce", numerics=_reduce_num, rule=_reduce_rule, doc="reduce over dims with sum/max/min")

# ------------------------------------------------------------------ gather


def _gather_num(x, idx, offset_dims, collapsed_slice_dims, start_index_map, index_vector_dim, slice_sizes,
                operand_batching_dims=(), start_indices_batching_dims=()):
    if operand_batching_dims:
        raise NotImplementedError("gather with batching dims")
    x, idx = np.asarray(x), np.asarray(idx).astype(np.int64)
    idx = idx[..., None] if index_vector_dim == idx.ndim else np.moveaxis(idx, index_vector_dim, -1)
    bshape = idx.shape[:-1]
    offs = tuple(n for d, n in enumerate(slice_sizes) if d not in collapsed_slice_dims)
    pieces = []
    for row in idx.reshape(-1, idx.shape[-1]):
        start = [0] * x.ndim
        for k, d in enumerate(start_index_map):
            start[d] = int(np.clip(row[k], 0, x.shape[d] - slice_sizes[d]))
        pieces.append(x[tuple(slice(s, s + n) for s, n in zip(start, slice_sizes))].reshape(offs))
    out = np.stack(pieces).reshape(bshape + offs) if pieces else np.zeros(bshape + offs, x.dtype)
    total = len(bshape) + len(offs)
    batch_pos = [d for d in range(total) if d not in offset_dims]
    return np.moveaxis(out, list(range(total)), batch_pos + list(offset_dims))


def _gather_rule(ctx: RuleCtx, x: Val, idx: Val, offset_dims, collapsed_slice_dims, start_index_map,
                 index_vector_dim, slice_sizes, operand_batching_dims=(), start_indices_batching_dims=()):
    """A lookup of whole slices at run-time positions of some dims (rows of a table, one
    token of a sequence): exact on any selection of the other dims of x and of the
    index's batch dims. Other gathers have no rule."""
    terms = ctx.terms
    shape = shape_of(terms, x)
    looked = sorted(start_index_map)
    if operand_batching_dims or sorted(collapsed_slice_dims) != looked \
            or any(slice_sizes[d] != (1 if d in looked else shape[d]) for d in range(len(shape))):
        raise ValueError("only gathers of whole slices at looked-up positions have a rule")
    if index_vector_dim == len(idx.vecs):
        idx = layout.unsqueeze(terms, idx, index_vector_dim)
    nd = len(idx.vecs)
    idx = layout.permute(terms, idx, [d for d in range(nd) if d != index_vector_dim] + [index_vector_dim])
    idx = layout.materialize(terms, idx, [nd - 1])
    x = layout.materialize(terms, x, looked)
    rest = [d for d in range(len(shape)) if d not in looked]
    tshape = terms.shape(idx.t)[:-1] + tuple(terms.shape(x.t)[d] for d in rest)
    t = terms.make("gather_slices", (tuple(start_index_map),), (x.t, idx.t), tshape)
    out = Val(t, idx.vecs[:-1] + tuple(x.vecs[d] for d in rest))
    total = len(out.vecs)
    batch_pos = [d for d in range(total) if d not in offset_dims]
    order = batch_pos + list(offset_dims)  # canonical axis k lands at output position order[k]
    return layout.permute(terms, out, [order.index(p) for p in range(total)])


declare(X + "gather", numerics=_gather_num, rule=_gather_rule, doc="gather (lookups of whole slices have a rule)")

# ------------------------------------------------------------------ collectives (dims and groups as XLA states them)


def _blocks(size: int, n: int):
    step = size // n
    return [(k * step, (k + 1) * step) for k in range(n)]


declare(X + "all_gather",
        numerics=lambda arrays, dim, group: [np.concatenate([np.asarray(a) for a in arrays], dim)] * len(arrays),
        rule=lambda ctx, vals, dim, group: [layout.concat(ctx.terms, vals, dim)] * len(vals),
        collective=True, doc="all_gather along a dim: Shard(dim) -> Replicate")


def _reduce_scatter_rule(ctx: RuleCtx, vals, kind, dim, group):
    whole = combine(ctx.terms, vals, kind)
    size = shape_of(ctx.terms, whole)[dim]
    return [layout.slice_(ctx.terms, whole, dim, lo, hi) for lo, hi in _blocks(size, len(vals))]


def _reduce_scatter_num(arrays, kind, dim, group):
    whole = _reduce_np(arrays, kind)
    return [np.take(whole, range(lo, hi), axis=dim) for lo, hi in _blocks(whole.shape[dim], len(arrays))]


declare(X + "reduce_scatter", numerics=_reduce_scatter_num, rule=_reduce_scatter_rule, collective=True,
        doc="reduce_scatter along a dim: Partial -> Shard(dim)")


def _a2a_rule(ctx: RuleCtx, vals, split_dim, concat_dim, group):
    n = len(vals)
    pieces = [[layout.slice_(ctx.terms, v, split_dim, lo, hi)
               for lo, hi in _blocks(shape_of(ctx.terms, v)[split_dim], n)] for v in vals]
    return [layout.concat(ctx.terms, [pieces[j][i] for j in range(n)], concat_dim) for i in range(n)]


def _a2a_num(arrays, split_dim, concat_dim, group):
    n = len(arrays)
    pieces = [np.split(np.asarray(a), n, axis=split_dim) for a in arrays]
    return [np.concatenate([pieces[j][i] for j in range(n)], concat_dim) for i in range(n)]


declare(X + "all_to_all", numerics=_a2a_num, rule=_a2a_rule, collective=True,
        doc="all_to_all: split along one dim, the i-th pieces concatenated on rank i")


def _permute_targets(pairs, group):
    source = {t: s for s, t in pairs}
    return [source.get(g) for g in group]


def _permute_rule(ctx: RuleCtx, vals, pairs, group):
    group = list(group)
    out = []
    for s in _permute_targets(pairs, group):
        out.append(vals[group.index(s)] if s is not None else _fill(ctx, 0, shape_of(ctx.terms, vals[0])))
    return out


declare(X + "collective_permute",
        numerics=lambda arrays, pairs, group: [np.asarray(arrays[list(group).index(s)]) if s is not None
                                               else np.zeros(np.shape(arrays[0]))
                                               for s in _permute_targets(pairs, group)],
        rule=_permute_rule, collective=True, doc="send each source's value to its target (zeros elsewhere)")

# ------------------------------------------------------------------ custom calls (AWS Neuron)

declare("custom_call.AwsNeuronTransferWithStaticRing", numerics=lambda x, **k: x, rule=lambda ctx, x, **k: x,
        doc="Neuron: moves a weight to the device; the value is unchanged")


def _norm_dim(x_nd: int, backend_config) -> int:
    return int(str(backend_config or "0").strip().strip('"') or 0) % x_nd


def _rms_norm_num(x, w, eps, backend_config="0"):
    x = as_float(x)
    d = _norm_dim(x.ndim, backend_config)
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=d, keepdims=True) + float(np.asarray(eps)))
    shape = [1] * x.ndim
    shape[d] = -1
    return x * rstd * as_float(w).reshape(shape)


def _rms_norm_rule(ctx: RuleCtx, x: Val, w: Val, eps, backend_config="0"):
    """RMSNorm over the dim `backend_config` names, scaled by a weight along it: exact on
    any selection of the other dims."""
    nd = len(x.vecs)
    d = _norm_dim(nd, backend_config)
    eps = layout.scalar_value(ctx.terms, eps) if isinstance(eps, Val) else eps
    if eps is None:
        raise ValueError("AwsNeuronRmsNorm with an unknown epsilon")
    order = [k for k in range(nd) if k != d] + [d]
    moved = layout.permute(ctx.terms, x, order)
    out = compute.rowwise(ctx.terms, "rms_norm", template((freeze(float(eps)),), {}), [moved, w], 1,
                          [shape_of(ctx.terms, moved)])[0]
    return layout.permute(ctx.terms, out, [order.index(k) for k in range(nd)])


declare("custom_call.AwsNeuronRmsNorm", numerics=_rms_norm_num, rule=_rms_norm_rule,
        doc="Neuron RMSNorm(x, weight, eps) over the dim in backend_config")
