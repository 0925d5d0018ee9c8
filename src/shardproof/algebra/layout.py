"""Layouts: which elements of a term a tensor holds, one index vector per dimension.

``Val(t, vecs)`` means ``value == term_t[np.ix_(*vecs)]``, where ``None`` stands for the
whole dimension. Shard, Replicate, Slices and Interleaved relations are all layouts; so
are the results of slicing, splitting, concatenating, permuting and reshaping. View ops
move only the layout; when a layout cannot follow a view exactly, the tensor is
*materialized* into a gather term, which is always exact (just less likely to match).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .layout_base import (Val, Vec, canon_vec, full, materialize, prod, same_vec, scalar_value,  # noqa: F401
                          shape_of, truncate, vec_array, vec_key, view_term)
from .layout_maps import MAX_MAPPED, _grid, _mapped, _settled, at_positions, flat_positions, view_levels  # noqa: F401
from .layout_reshape import (_divisors_from, _group_dims, _group_dims_units_left, _reshape_built,  # noqa: F401
                             _reshape_options, _selection_cost, _split_candidates, reshape)
from .padding_base import common_padding
from .terms import TermStore


def permute(terms: TermStore, val: Val, perm: Sequence[int]) -> Val:
    perm = tuple(int(p) % len(val.vecs) for p in perm)
    if _mapped(terms, val):
        return at_positions(terms, val.t, flat_positions(terms, val).transpose(perm))
    ts = terms.shape(val.t)
    t = view_term(terms, "permute", (perm,), val.t, [ts[p] for p in perm])
    return Val(t, tuple(val.vecs[p] for p in perm))


def slice_(terms: TermStore, val: Val, dim: int, start, stop, step: int = 1) -> Val:
    ts = terms.shape(val.t)
    v = vec_array(val.vecs[dim], ts[dim])
    new = v[slice(start, stop, step)]
    vecs = list(val.vecs)
    vecs[dim] = canon_vec(new, ts[dim])
    return _selection(terms, Val(val.t, tuple(vecs)), dim)


def take(terms: TermStore, val: Val, dim: int, index: np.ndarray) -> Val:
    """Select positions `index` along `dim` (index_select with a known index)."""
    ts = terms.shape(val.t)
    v = vec_array(val.vecs[dim], ts[dim])
    vecs = list(val.vecs)
    vecs[dim] = canon_vec(v[np.asarray(index, dtype=np.int64)], ts[dim])
    return _selection(terms, Val(val.t, tuple(vecs)), dim)


def _selection(terms: TermStore, val: Val, dim: int) -> Val:
    """A selection along `dim`, as the piece of a ``cat`` it falls in (gathering and then
    splitting returns what was gathered) -- unless the single-device program computes the
    (viewed) cat itself as a tensor: then the selection of it is already related (a rank's
    block of a gradient that the single device concatenates from its pieces, as the
    backward of a chunk), where the piece alone would be a whole different tensor."""
    inner = terms[val.t]
    if val.t in terms.reference and (inner.op == "cat" or inner.op == "reshape"
                                     and terms[inner.children[0]].op == "cat"):
        return val
    return _settled(terms, _within_viewed_cat(terms, within_piece(terms, val, dim)))


def unmaterialize(terms: TermStore, val: Val) -> Val:
    """``gather(x, sel)[vecs]`` is ``x[sel ∘ vecs]``: undo a materialization."""
    term = terms[val.t]
    if term.op != "gather":
        return val
    inner = terms.shape(term.children[0])
    vecs = []
    for d, key in enumerate(term.attrs):
        sel = np.arange(inner[d], dtype=np.int64) if key is None else np.frombuffer(key, dtype=np.int64)
        vecs.append(canon_vec(sel[vec_array(val.vecs[d], term.shape[d])], inner[d]))
    return Val(term.children[0], tuple(vecs))


def within_piece(terms: TermStore, val: Val, dim: int) -> Val:
    """A selection along `dim` of ``cat(p_0, p_1, ...)`` that falls inside one piece is a
    selection of that piece (gathering and then splitting returns what was gathered)."""
    term = terms[val.t]
    if term.op == "lin" and len(term.children) == 1 and terms[term.children[0]].op == "cat":  # c·cat(...)
        from .lemmas import linear
        inner = within_piece(terms, Val(term.children[0], val.vecs), dim)
        return val if inner.t == term.children[0] else \
            Val(linear(terms, {inner.t: term.attrs[0]}, terms.shape(inner.t)), inner.vecs)
    if term.op != "cat" or term.attrs[0] != dim or val.vecs[dim] is None or not len(val.vecs[dim]):
        return val
    v, at = val.vecs[dim], 0
    for piece in term.children:
        size = terms.shape(piece)[dim]
        if at <= v.min() and v.max() < at + size:
            vecs = list(val.vecs)
            vecs[dim] = canon_vec(v - at, size)
            inner = unmaterialize(terms, Val(piece, tuple(vecs)))
            return within_piece(terms, inner, dim)  # the piece (or what it gathers from) may be a cat too
        at += size
    joined = concat(terms, piece_runs(terms, val, dim), dim)  # runs of several pieces: one layout again?
    return joined if terms[joined.t].op not in ("cat", "take") else val


def piece_runs(terms: TermStore, val: Val, dim: int) -> list[Val]:
    """A selection of ``cat(p_0, p_1, ...)`` along its dim `dim`, cut into its runs within
    each piece (in order): each a selection of that piece. Runs that are selections of one
    term join again (FSDP's flat shards of a parameter, all-gathered between other
    parameters' shards, are that parameter)."""
    term = terms[val.t]
    v = vec_array(val.vecs[dim], terms.shape(val.t)[dim])
    starts = np.cumsum([0] + [terms.shape(c)[dim] for c in term.children[:-1]])
    which = np.searchsorted(starts, v, side="right") - 1
    runs = []
    for idx in np.split(np.arange(len(v)), np.flatnonzero(np.diff(which)) + 1):
        k = int(which[idx[0]])
        piece = term.children[k]
        vecs = list(val.vecs)
        vecs[dim] = canon_vec(v[idx] - starts[k], terms.shape(piece)[dim])
        runs.append(_within_viewed_cat(terms, within_piece(terms, unmaterialize(terms, Val(piece, tuple(vecs))), dim)))
    return runs


def _within_viewed_cat(terms: TermStore, val: Val) -> Val:
    """A selection of a reshaped ``cat`` whose elements are, in order, a grid of the cat:
    with one index on every dim before the cat dim, the pieces' selections flattened one
    after another (a row of FSDP's reduce-scatter buffer: each gradient's chunk in turn,
    zero padding included); else a grid inside one piece is that piece's selection."""
    term = terms[val.t]
    if term.op != "reshape" or terms[term.children[0]].op != "cat" or prod(shape_of(terms, val)) > MAX_MAPPED:
        return val
    inner = term.children[0]
    shape = terms.shape(inner)
    flat = flat_positions(terms, val).ravel()
    coords = np.unravel_index(flat, shape)
    vecs = [c[np.sort(np.unique(c, return_index=True)[1])] for c in coords]
    if not np.array_equal(np.ravel_multi_index(np.ix_(*vecs), shape).ravel(), flat):
        return val
    sel = Val(inner, tuple(canon_vec(v, s) for v, s in zip(vecs, shape)))
    dim = terms[inner].attrs[0]
    if all(len(v) == 1 for v in vecs[:dim]):  # then the pieces' elements follow each other in row-major order
        runs = [reshape(terms, run, (prod(shape_of(terms, run)),)) for run in piece_runs(terms, sel, dim)]
        line = concat(terms, runs, 0) if len(runs) > 1 else runs[0]
        return reshape(terms, line, shape_of(terms, val))
    piece = within_piece(terms, sel, dim)
    if terms[piece.t].op in ("cat", "take"):
        return val
    return reshape(terms, piece, shape_of(terms, val))


def select(terms: TermStore, val: Val, dim: int, index: int) -> Val:
    ts = terms.shape(val.t)
    pos = int(vec_array(val.vecs[dim], ts[dim])[index])
    shape = ts[:dim] + ts[dim + 1:]
    if ts[dim] == 1:  # the one element of a size-1 dim: that dim dropped (reshapes collapse)
        return Val(view_term(terms, "reshape", (tuple(shape),), val.t, shape), val.vecs[:dim] + val.vecs[dim + 1:])
    t = terms.make("select", (dim, pos), (val.t,), shape)
    return Val(t, val.vecs[:dim] + val.vecs[dim + 1:])


def unsqueeze(terms: TermStore, val: Val, dim: int) -> Val:
    ts = terms.shape(val.t)
    dim = dim % (len(ts) + 1)
    shape = ts[:dim] + (1,) + ts[dim:]
    t = view_term(terms, "reshape", (shape,), val.t, shape)
    return Val(t, val.vecs[:dim] + (None,) + val.vecs[dim:])


def squeeze(terms: TermStore, val: Val, dims: Sequence[int]) -> Val:
    for d in sorted((d % len(val.vecs) for d in dims), reverse=True):
        ts = terms.shape(val.t)
        if ts[d] == 1:
            shape = ts[:d] + ts[d + 1:]
            t = view_term(terms, "reshape", (shape,), val.t, shape)
            val = Val(t, val.vecs[:d] + val.vecs[d + 1:])
        else:
            val = select(terms, val, d, 0)
    return val


def expand(terms: TermStore, val: Val, shape: Sequence[int]) -> Val:
    shape = list(shape)
    while len(val.vecs) < len(shape):
        val = unsqueeze(terms, val, 0)
    cur = shape_of(terms, val)
    shape = [c if s == -1 else s for s, c in zip(shape, cur)]
    if list(cur) == shape:
        return val
    # broadcasting a size-1 dim repeats its one position: a selection with repeats,
    # so expanding by 2 on one rank and by 4 on another select from the same term
    ts = terms.shape(val.t)
    vecs = list(val.vecs)
    for d in range(len(shape)):
        if cur[d] != shape[d]:
            if cur[d] != 1:
                raise ValueError(f"cannot expand dim {d} of size {cur[d]} to {shape[d]}")
            pos = vec_array(val.vecs[d], ts[d])[0]
            vecs[d] = canon_vec(np.full(shape[d], pos, dtype=np.int64), ts[d])
    return Val(val.t, tuple(vecs))


def _broadcast_to_selection(terms: TermStore, val: Val, extent: dict) -> Val:
    """A piece broadcast along dims of `extent` ({dim: (term extent, selection)}) as the
    same selection of an expanded term: its values are equal at every position there."""
    ts = terms.shape(val.t)
    dims = [d for d in extent if ts[d] == 1 and extent[d][0] > 1]
    if not dims:
        return val
    local = shape_of(terms, val)
    val = materialize(terms, val, [d for d in range(len(ts)) if d not in extent])
    shape = [extent[d][0] if d in dims else (ts[d] if d in extent else local[d]) for d in range(len(ts))]
    t = terms.make("expand", (tuple(shape),), (val.t,), shape)
    return Val(t, tuple(extent[d][1] if d in dims else val.vecs[d] for d in range(len(ts))))


def _selection_of_built_cat(terms: TermStore, vals: Sequence[Val], dim: int, keep: list) -> Val | None:
    """``cat(x_1[s_1], ..., x_n[s_n])`` along `dim` is ``cat(y_1, ..., y_n)[s]`` where each
    ``y_i`` is ``x_i`` or a selection of it along `dim` holding ``s_i``, `s` the positions of
    the ``s_i`` in the ``y_i`` shifted by each piece's offset (exact). Taken when the other
    program already built such a cat: a fused projection's gradient re-fused from its q, k
    and v sections' gradients (cut from larger terms on one side, each rank's pieces of those
    cuts on the other) is then a selection of one term in both programs."""
    nd = len(vals[0].vecs)
    if all(v.vecs[dim] is None for v in vals):
        return None
    wholes = [materialize(terms, v, [d for d in range(nd) if d not in keep and d != dim]) for v in vals]
    for t in terms.of_op("cat"):
        term = terms[t]
        if term.attrs != (dim,) or len(term.children) != len(wholes):
            continue
        joined, at = [], 0
        for child, w in zip(term.children, wholes):
            pos = _positions_in_piece(terms, child, w, dim)
            if pos is None:
                break
            joined.append(pos + at)
            at += terms.shape(child)[dim]
        else:
            vecs = [wholes[0].vecs[d] if d in keep else None for d in range(nd)]
            vecs[dim] = canon_vec(np.concatenate(joined), at)
            return Val(t, tuple(vecs))
    return None


def _positions_in_piece(terms: TermStore, child: int, w: Val, dim: int):
    """Where `w`'s selection along `dim` lies in `child`: `w`'s own term, or a selection of
    it along `dim` only (a gather) that holds all of it; None otherwise."""
    size = terms.shape(w.t)[dim]
    want = vec_array(w.vecs[dim], size)
    if child == w.t:
        return want
    term = terms[child]
    if term.op != "gather" or term.children != (w.t,) or any(k is not None for d, k in enumerate(term.attrs) if d != dim):
        return None
    sel = vec_array(None if term.attrs[dim] is None else np.frombuffer(term.attrs[dim], dtype=np.int64), size)
    where = {int(p): i for i, p in enumerate(sel)}
    if not all(int(p) in where for p in want):
        return None
    return np.array([where[int(p)] for p in want], dtype=np.int64)


def concat(terms: TermStore, vals: Sequence[Val], dim: int) -> Val:
    """Concatenate along `dim`; pieces of one term merge into one layout (pieces of a term
    and of the term with zero padding: of the padded one)."""
    vals = common_padding(terms, vals)
    first = vals[0]
    dim = dim % len(first.vecs)
    same_base = all(
        v.t == first.t and all(same_vec(v.vecs[d], first.vecs[d]) for d in range(len(v.vecs)) if d != dim)
        for v in vals)
    if same_base:
        ts = terms.shape(first.t)
        joined = np.concatenate([vec_array(v.vecs[dim], ts[dim]) for v in vals])
        vecs = list(first.vecs)
        vecs[dim] = canon_vec(joined, ts[dim])
        return Val(first.t, tuple(vecs))
    if all(v.t == first.t for v in vals) and sum(prod(shape_of(terms, v)) for v in vals) <= MAX_MAPPED:
        # pieces of one term selected differently on other dims (an all_to_all's blocks)
        return at_positions(terms, first.t, np.concatenate([flat_positions(terms, v) for v in vals], dim))
    # other dims selected alike in every piece stay selections (cat commutes with them);
    # a piece broadcast along a dim (a constant fill) agrees with any selection of it
    nd = len(first.vecs)
    keep, extent = [], {}
    for d in range(nd):
        carriers = [v for v in vals if terms.shape(v.t)[d] > 1]
        if d == dim or not carriers:
            continue
        ref = carriers[0]
        if all(terms.shape(v.t)[d] == terms.shape(ref.t)[d] and same_vec(v.vecs[d], ref.vecs[d]) for v in carriers):
            keep.append(d)
            extent[d] = (terms.shape(ref.t)[d], ref.vecs[d])
    vals = [_broadcast_to_selection(terms, v, extent) for v in vals]
    picked = _selection_of_built_cat(terms, vals, dim, keep)
    if picked is not None:
        return picked
    parts = [materialize(terms, v, [d for d in range(nd) if d not in keep]) for v in vals]
    shapes = [terms.shape(p.t) for p in parts]
    shape = list(shapes[0])
    shape[dim] = sum(s[dim] for s in shapes)
    t = terms.make("cat", (dim,), tuple(p.t for p in parts), shape)
    return Val(t, tuple(first.vecs[d] if d in keep else None for d in range(nd)))
