"""Lemmas for computing ops, phrased over layouts.

Each function pulls index vectors up through an op when that is exact (elementwise ops
commute with selection; reductions and contractions over a fully held dim commute with
selection of the other dims) and otherwise either builds a *partial* term (a reduction
over a subset of a dim, to be completed by a collective) or materializes.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

import numpy as np

from .layout import permute as layout_permute, select as layout_select, slice_ as layout_slice
from .layout import (Val, canon_vec, materialize, same_vec, shape_of, truncate, unmaterialize, vec_array, vec_key,
                     view_term)
from .terms import TermStore


def _aligned(terms: TermStore, vals: list[Val], full_dims: Sequence[int] = ()) -> tuple[list[Val], tuple, tuple]:
    """Broadcast-align operands (right-aligned, numpy rules).

    Returns the operands (some materialized), the output layout and the output term
    shape. `full_dims` (negative, right-aligned) must be held whole by every operand.
    """
    vals = list(vals)
    nd = max(len(v.vecs) for v in vals)
    for k in full_dims:
        for i, v in enumerate(vals):
            d = len(v.vecs) + k
            if 0 <= d and v.vecs[d] is not None:
                vals[i] = materialize(terms, v, [d])
    out_vecs, out_shape = [], []
    for k in range(nd):
        def dim_of(v: Val):
            d = k - (nd - len(v.vecs))
            return d if d >= 0 else None
        sizes = [shape_of(terms, v)[dim_of(v)] for v in vals if dim_of(v) is not None]
        if 0 in sizes:  # numpy: extents 0 and 1 broadcast to 0 -- an operand of one element holds none of it
            for i, v in enumerate(vals):
                d = dim_of(v)
                if d is not None and shape_of(terms, v)[d] == 1:
                    vals[i] = layout_slice(terms, v, d, 0, 0)
            sizes = [shape_of(terms, v)[dim_of(v)] for v in vals if dim_of(v) is not None]
        out_size = max(sizes) if sizes else 1
        # an operand holding one element of a longer term dim, broadcast: materialize it
        for i, v in enumerate(vals):
            d = dim_of(v)
            if d is not None and out_size > 1 and terms.shape(v.t)[d] > 1 and shape_of(terms, v)[d] == 1:
                vals[i] = materialize(terms, v, [d])
        carriers = [i for i, v in enumerate(vals) if dim_of(v) is not None and terms.shape(v.t)[dim_of(v)] > 1]
        if carriers:
            ref = vals[carriers[0]]
            ref_d = dim_of(ref)
            agree = all(
                terms.shape(vals[i].t)[dim_of(vals[i])] == terms.shape(ref.t)[ref_d]
                and same_vec(vals[i].vecs[dim_of(vals[i])], ref.vecs[ref_d]) for i in carriers)
            if not agree:
                shifted = _selection_aligned(terms, [vals[i] for i in carriers], [dim_of(vals[i]) for i in carriers]) \
                    or _prefix_aligned(terms, [vals[i] for i in carriers], [dim_of(vals[i]) for i in carriers]) \
                    or _offset_aligned(terms, [vals[i] for i in carriers], [dim_of(vals[i]) for i in carriers])
                for n, i in enumerate(carriers):
                    vals[i] = shifted[n] if shifted else materialize(terms, vals[i], [dim_of(vals[i])])
                ref = vals[carriers[0]]
                ref_d = dim_of(ref)
            out_vecs.append(ref.vecs[ref_d])
            out_shape.append(terms.shape(ref.t)[ref_d])
        else:  # every operand is one position along this dim: keep how often it is repeated
            reps = [v.vecs[dim_of(v)] for v in vals if dim_of(v) is not None and v.vecs[dim_of(v)] is not None]
            out_vecs.append(reps[0] if reps else None)
            out_shape.append(1)
    return vals, tuple(out_vecs), tuple(out_shape)


def _prefix_aligned(terms: TermStore, vals: list[Val], dims: list[int]):
    """Operands holding the same positions of dims of different extents, all below the
    shortest (a head block of a fused attention output against the same block of the
    unfused weight): each is cut to the shortest extent (as contractions do), keeping
    the common selection; None if not so."""
    sizes = [terms.shape(v.t)[d] for v, d in zip(vals, dims)]
    low = min(sizes)
    pos = [vec_array(v.vecs[d], s) for v, d, s in zip(vals, dims, sizes)]
    if len(set(sizes)) < 2 or any(len(p) != len(pos[0]) or not np.array_equal(p, pos[0]) for p in pos) \
            or not len(pos[0]) or pos[0].max() >= low:
        return None
    return [truncate(terms, v, d, low) for v, d in zip(vals, dims)]


def _selection_aligned(terms: TermStore, vals: list[Val], dims: list[int]):
    """Operands holding positions ``w`` of a longer dim and ``v`` of a shorter one where a
    selection ``S`` of the longer dim that the programs already built (a gather term of it,
    e.g. the single device's grouped-query heads picked out of an expanded tensor) has
    ``S[v] = w``: ``A[w] = gather(A, S)[v]``, so every operand holds ``v`` of dims of one
    extent; None if not so."""
    sizes = [terms.shape(v.t)[d] for v, d in zip(vals, dims)]
    n = min(sizes)
    refs = [vec_array(v.vecs[d], n) for v, d, m in zip(vals, dims, sizes) if m == n]
    if len(set(sizes)) < 2 or any(len(r) != len(refs[0]) or not np.array_equal(r, refs[0]) for r in refs):
        return None
    v = refs[0]
    out = []
    for val, d, m in zip(vals, dims, sizes):
        if m == n:
            out.append(val)
            continue
        w = vec_array(val.vecs[d], m)
        found = None
        for g in terms.of_op("gather"):
            term = terms[g]
            if term.children != (val.t,) or term.shape[d] != n or \
                    any(k is not None for i, k in enumerate(term.attrs) if i != d) or term.attrs[d] is None:
                continue
            sel = np.frombuffer(term.attrs[d], dtype=np.int64)
            if len(w) == len(v) and np.array_equal(sel[v], w):
                found = g
                break
        if found is None:
            return None
        vecs = list(val.vecs)
        vecs[d] = canon_vec(v, n)
        out.append(Val(found, tuple(vecs)))
    return out


def _offset_aligned(terms: TermStore, vals: list[Val], dims: list[int]):
    """Operands holding the same number of positions of equally long dims, each at a
    constant offset from the others (the two halves of a fused gate_up projection):
    ``f(A[v], B[v + c]) = f(A[0:L], B[c:c+L])[v]``. Each operand becomes a window of
    its term starting at its offset above the smallest one, all of length L (the
    longest every window allows), selected by one common vector; None if not so. Dims of
    different extents (a fused projection's half against the unfused gradient) too: L is
    the longest window every operand holds, and an operand whose window is all of it stays."""
    sizes = [terms.shape(v.t)[d] for v, d in zip(vals, dims)]
    vecs = [vec_array(v.vecs[d], size) for v, d, size in zip(vals, dims, sizes)]
    if any(len(v) != len(vecs[0]) or not len(v) for v in vecs):
        return None
    offs = [int(v[0] - vecs[0][0]) for v in vecs]
    if any(not np.array_equal(v - vecs[0], np.full(len(v), o)) for v, o in zip(vecs, offs)) or len(set(offs)) < 2:
        return None
    low = min(offs)
    length = min(size - (o - low) for size, o in zip(sizes, offs))
    out = []
    for val, d, vec, o in zip(vals, dims, vecs, offs):
        start = o - low
        ts = list(terms.shape(val.t))
        if start == 0 and length == ts[d]:
            out.append(val)
            continue
        sel = [None] * len(ts)
        sel[d] = np.arange(start, start + length, dtype=np.int64)
        ts[d] = length
        t = terms.make("gather", tuple(vec_key(x) for x in sel), (val.t,), ts)
        vecs_out = list(val.vecs)
        vecs_out[d] = canon_vec(vec - start, length)
        out.append(Val(t, tuple(vecs_out)))
    return out


def elementwise(terms: TermStore, op: str, attrs: tuple, vals: list[Val], commutative: bool = False,
                full_dims: Sequence[int] = ()) -> Val:
    terms.elementwise_ops.add(op)
    vals, vecs, shape = _aligned(terms, vals, full_dims)
    children = tuple(v.t for v in vals)
    lifted = _reshape_lifted(terms, children, shape)
    if lifted is not None:
        base, children = lifted
        inner = terms.make(op, attrs, tuple(sorted(children)) if commutative else children, terms.shape(base))
        return Val(view_term(terms, "reshape", (tuple(shape),), inner, shape), vecs)
    if commutative:
        children = tuple(sorted(children))
    return Val(terms.make(op, attrs, children, shape), vecs)


def _reshape_lifted(terms: TermStore, children: tuple, shape: tuple):
    """Normal form: elementwise ops apply *before* reshapes. ``f(reshape(x), reshape(y))``
    (the same view of both) becomes ``reshape(f(x, y))``, and ``f(reshape(x), b)`` becomes
    ``reshape(f(x, b))`` when every other operand only spans trailing dims the reshape
    keeps (a bias over the hidden dim of a ``[b*s, h] -> [b, s, h]`` view), so programs
    that view before or after an elementwise op build the same term."""
    views = [terms[c] for c in children]
    if len(children) > 1 and all(v.op == "reshape" and v.shape == tuple(shape) for v in views) \
            and len({terms.shape(v.children[0]) for v in views}) == 1:  # the same view of each operand
        return views[0].children[0], tuple(v.children[0] for v in views)
    for i, c in enumerate(children):
        tc = terms[c]
        if tc.op != "reshape" or tc.shape != tuple(shape):
            continue
        base = tc.children[0]
        bs = terms.shape(base)
        others = [o for j, o in enumerate(children) if j != i]
        k = max((len(terms.shape(o)) for o in others), default=0)
        if k >= len(shape) or k > len(bs) or tuple(bs[len(bs) - k:]) != tuple(shape[len(shape) - k:]):
            continue
        return base, children[:i] + (base,) + children[i + 1:]
    return None


def rowwise(terms: TermStore, op: str, attrs: tuple, vals: list[Val], ndims: int,
            out_shapes: Sequence[Sequence[int]]) -> list[Val]:
    """Ops normalizing over the last `ndims` dims of the first operand (softmax,
    layer/RMS norm): exact on any selection of the other dims. One term per output;
    `out_shapes` are the outputs' (local) shapes, whose trailing dims may be reduced."""
    vals, vecs, shape = _aligned(terms, vals, full_dims=range(-ndims, 0))
    children = tuple(v.t for v in vals)
    outs = []
    for i, oshape in enumerate(out_shapes):
        lead = len(oshape) - ndims
        tshape = shape[len(shape) - len(oshape):len(shape) - ndims] + tuple(oshape[lead:])
        ovecs = vecs[len(vecs) - len(oshape):len(vecs) - ndims] + (None,) * ndims
        outs.append(Val(terms.make(op, attrs + (i,), children, tshape), ovecs))
    return outs


def scale(terms: TermStore, t: int, c) -> int:
    """Multiply a term by an exact constant, folding nested scales."""
    c = Fraction(c)
    inner = terms[t]
    if inner.op == "scale":
        c *= inner.attrs[0]
        t = inner.children[0]
    if c == 1:
        return t
    return terms.make("scale", (c,), (t,), terms.shape(t))


def _over(v: np.ndarray | None, size: int):
    """The index set a partial reduction covers, order-free; None when it is all of it."""
    if v is None:
        return None
    s = np.sort(v)
    if len(s) == size and np.array_equal(s, np.arange(size)):
        return None
    return s.tobytes()


# plain sums of a value built another way first (term, value, dims, keepdim) -> Val or None;
# registered by the modules that define them (algebra/sum_pieces.py: over a cat's pieces)
SUM_HOOKS: list = []


def reduction(terms: TermStore, op: str, attrs: tuple, val: Val, dims: Sequence[int], keepdim: bool,
              combinable: bool) -> Val:
    """Reduce over `dims`. Over a selected subset of a dim, a combinable reduction (sum,
    max, min) becomes a partial term that a collective can complete; others materialize."""
    terms.reduction_ops.add(op)
    nd = len(val.vecs)
    dims = sorted({d % nd for d in dims}) if dims else list(range(nd))
    for hook in SUM_HOOKS if op == "sum" and not attrs else ():
        pieces = hook(terms, val, dims, keepdim)
        if pieces is not None:
            return pieces
    val, factor = _collapse_repeats(terms, op, val, dims) if combinable else (val, 1)
    if not combinable:
        val = materialize(terms, val, [d for d in dims if val.vecs[d] is not None])
    ts = terms.shape(val.t)
    over = tuple(_over(val.vecs[d], ts[d]) for d in dims)
    if all(o is None for o in over):
        over = None
    shape, vecs = [], []
    for d in range(nd):
        if d in dims:
            if keepdim:
                shape.append(1); vecs.append(None)
        else:
            shape.append(ts[d]); vecs.append(val.vecs[d])
    t = terms.make(op, (tuple(dims), keepdim, over) + attrs, (val.t,), shape)
    return Val(t if factor == 1 else scale(terms, t, factor), tuple(vecs))


REPEAT_INVARIANT = {"amax", "amin", "max", "min"}  # reductions a repeated element does not change


def _collapse_repeats(terms: TermStore, op: str, val: Val, dims: Sequence[int]) -> tuple[Val, int]:
    """A reduced dim along which `val` repeats one term position n times (a broadcast
    size-1 dim, a constant fill of any local extent): the sum over it is n times that
    element, a max/min the element itself. Returns `val` holding the position once along
    such dims, and the factor n (product over the dims) the sum is scaled by."""
    if op != "sum" and op not in REPEAT_INVARIANT:
        return val, 1
    ts = terms.shape(val.t)
    vecs, factor = list(val.vecs), 1
    for d in dims:
        v = val.vecs[d]
        if v is not None and len(v) > 1 and bool((v == v[0]).all()):
            factor *= len(v) if op == "sum" else 1
            vecs[d] = canon_vec(v[:1], ts[d])
    return Val(val.t, tuple(vecs)), factor


def _one_position(terms: TermStore, val: Val, d: int) -> bool:
    """Whether `val` repeats one term position along `d` (a broadcast size-1 dim)."""
    size = terms.shape(val.t)[d]
    v = vec_array(val.vecs[d], size)
    return len(v) > 0 and bool((v == v[0]).all()) and (len(v) > 1 or size == 1)


def _broadcast_batch(terms: TermStore, a: Val, b: Val, lhs_batch, rhs_batch):
    """The first batch pair (its index, and 0 for the lhs or 1 for the rhs) where one operand
    is a broadcast (one position repeated) and the operands hold different positions."""
    ash, bsh = terms.shape(a.t), terms.shape(b.t)
    for k, (i, j) in enumerate(zip(lhs_batch, rhs_batch)):
        if ash[i] == bsh[j] and same_vec(a.vecs[i], b.vecs[j]):
            continue
        if _one_position(terms, a, i):
            return k, 0
        if _one_position(terms, b, j):
            return k, 1
    return None


def _dot_broadcast_batch(terms: TermStore, a: Val, b: Val, lhs_batch, rhs_batch, lhs_contract, rhs_contract,
                         k: int, side: int) -> Val:
    """A batch dim along which one operand is broadcast is a free dim of the other: the
    product of ``A[p]`` (one fixed position p) with every ``B[n]`` is the contraction of
    ``A[p]`` with ``B`` keeping n, moved back to the batch slot. Both programs reach the same
    term whichever part of B each holds (experts applied to shared tokens)."""
    def without(dims, d):
        return tuple(x - (x > d) for x in dims if x != d)

    i, j = lhs_batch[k], rhs_batch[k]
    lb, rb = lhs_batch[:k] + lhs_batch[k + 1:], rhs_batch[:k] + rhs_batch[k + 1:]
    if side == 0:
        a = layout_select(terms, a, i, 0)
        out = dot(terms, a, b, without(lb, i), rb, without(lhs_contract, i), rhs_contract)
        nlfree = len(a.vecs) - len(lb) - len(lhs_contract)
        rfree = [d for d in range(len(b.vecs)) if d not in rb and d not in rhs_contract]
        at = len(lb) + nlfree + rfree.index(j)
    else:
        b = layout_select(terms, b, j, 0)
        out = dot(terms, a, b, lb, without(rb, j), lhs_contract, without(rhs_contract, j))
        lfree = [d for d in range(len(a.vecs)) if d not in lb and d not in lhs_contract]
        at = len(lb) + lfree.index(i)
    order = [d for d in range(len(out.vecs)) if d != at]
    return layout_permute(terms, out, order[:k] + [at] + order[k:])


def pair_set(av, asize: int, bv, bsize: int) -> bytes | None:
    """The multiset of index pairs (i, j) a contracted dim sums over, A[i]*B[j], sorted
    (summation is order-free); None when it is every (i, i) of equal extents."""
    a = np.arange(asize, dtype=np.int64) if av is None else np.asarray(av, dtype=np.int64)
    b = np.arange(bsize, dtype=np.int64) if bv is None else np.asarray(bv, dtype=np.int64)
    if asize == bsize and len(a) == asize and np.array_equal(a, b) and np.array_equal(np.sort(a), np.arange(asize)):
        return None
    pairs = np.stack([a, b], 1)
    return np.ascontiguousarray(pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]).tobytes()


def dot(terms: TermStore, a: Val, b: Val, lhs_batch: Sequence[int], rhs_batch: Sequence[int],
        lhs_contract: Sequence[int], rhs_contract: Sequence[int], pairings: Sequence | None = None) -> Val:
    """General contraction (XLA dot_general): out = batch dims, lhs free, rhs free.

    A contracted dim sums A[i]*B[j] over a multiset of index pairs, which the term keeps
    (no materialization): contractions over the pieces of a split dim -- whatever
    selection each side holds, a per-head slice of a fused projection against a block
    of weight rows -- are partial sums that complete to the full product. Operands are
    never gathers (a materialized selection is the selection), so both programs build
    the same term however they got there.

    `pairings` (one per batch pair, None for aligned ones) say how a batch dim pairs the
    two operands' term positions when they hold different ones (grouped-query heads: see
    :func:`shardproof.ops.pairing.pairing_of`): the term's batch dim is then the lhs term's and
    the pairing is part of the term, so any selection of lhs positions is exact (the
    pairings are of the operands' unmaterialized positions)."""
    paired = [p is not None for p in (pairings or [None] * len(lhs_batch))]
    a, b = unmaterialize(terms, a), unmaterialize(terms, b)
    if not any(paired):
        broadcast = _broadcast_batch(terms, a, b, lhs_batch, rhs_batch)
        if broadcast is not None:
            return _dot_broadcast_batch(terms, a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract, *broadcast)
    ash, bsh = terms.shape(a.t), terms.shape(b.t)
    for (i, j), is_paired in zip(zip(lhs_batch, rhs_batch), paired):
        if is_paired:
            continue
        if ash[i] != bsh[j] and same_vec(a.vecs[i], b.vecs[j]):
            a, b = truncate(terms, a, i, min(ash[i], bsh[j])), truncate(terms, b, j, min(ash[i], bsh[j]))
            ash, bsh = terms.shape(a.t), terms.shape(b.t)
        if not (ash[i] == bsh[j] and same_vec(a.vecs[i], b.vecs[j])):
            a, b = _selection_aligned(terms, [a, b], [i, j]) or (materialize(terms, a, [i]), materialize(terms, b, [j]))
            ash, bsh = terms.shape(a.t), terms.shape(b.t)
    over = tuple(pair_set(a.vecs[i], ash[i], b.vecs[j], bsh[j]) for i, j in zip(lhs_contract, rhs_contract))
    if all(o is None for o in over):
        over = None
    lfree = [d for d in range(len(ash)) if d not in lhs_batch and d not in lhs_contract]
    rfree = [d for d in range(len(bsh)) if d not in rhs_batch and d not in rhs_contract]
    shape = [ash[i] for i in lhs_batch] + [ash[i] for i in lfree] + [bsh[j] for j in rfree]
    vecs = [a.vecs[i] for i in lhs_batch] + [a.vecs[i] for i in lfree] + [b.vecs[j] for j in rfree]
    spec = (tuple(lhs_batch), tuple(rhs_batch), tuple(lhs_contract), tuple(rhs_contract))
    if any(paired):
        spec += (tuple(pairings),)
    return Val(terms.make("dot", (spec, over), (a.t, b.t), shape), tuple(vecs))
