"""Layouts: which elements of a term a tensor holds, one index vector per dimension.

``Val(t, vecs)`` means ``value == term_t[np.ix_(*vecs)]``, where ``None`` stands for the
whole dimension. Shard, Replicate, Slices and Interleaved relations are all layouts; so
are the results of slicing, splitting, concatenating, permuting and reshaping. View ops
move only the layout; when a layout cannot follow a view exactly, the tensor is
*materialized* into a gather term, which is always exact (just less likely to match).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from operator import mul
from typing import Optional, Sequence

import numpy as np

from .terms import TermStore

Vec = Optional[np.ndarray]


@dataclass(frozen=True, eq=False)
class Val:
    t: int
    vecs: tuple

    def key(self) -> tuple:
        return (self.t, tuple(None if v is None else v.tobytes() for v in self.vecs))

    def same(self, other: "Val") -> bool:
        return self.key() == other.key()


def prod(xs) -> int:
    return reduce(mul, xs, 1)


def full(terms: TermStore, t: int) -> Val:
    return Val(t, (None,) * len(terms.shape(t)))


def vec_array(v: Vec, size: int) -> np.ndarray:
    return np.arange(size, dtype=np.int64) if v is None else v


def canon_vec(v: np.ndarray, size: int) -> Vec:
    """None when the vector selects the whole dimension in order."""
    v = np.asarray(v, dtype=np.int64)
    if len(v) == size and np.array_equal(v, np.arange(size)):
        return None
    return v


def same_vec(a: Vec, b: Vec) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and np.array_equal(a, b)


def shape_of(terms: TermStore, val: Val) -> tuple[int, ...]:
    ts = terms.shape(val.t)
    return tuple(ts[k] if v is None else len(v) for k, v in enumerate(val.vecs))


def vec_key(v: Vec):
    return None if v is None else v.tobytes()


def scalar_value(terms: TermStore, val: Val):
    """The Python number a 0-d constant (or a broadcast of one) holds, else None."""
    t = terms[val.t]
    while t.op == "expand" or (t.op == "reshape" and np.prod(t.shape) == 1):
        t = terms[t.children[0]]
    if t.op == "fill":
        return t.attrs[0]
    if t.op != "const" or t.attrs[1] != ():
        return None
    return np.frombuffer(t.attrs[2], dtype=np.dtype(t.attrs[0])).item()


# ---------------------------------------------------------------- materialize

def materialize(terms: TermStore, val: Val, dims: Sequence[int] | None = None) -> Val:
    """Turn the selection on `dims` (default: all) into a gather term, exactly."""
    dims = range(len(val.vecs)) if dims is None else dims
    sel = [val.vecs[d] if d in dims else None for d in range(len(val.vecs))]
    if all(v is None for v in sel):
        return val
    ts = terms.shape(val.t)
    shape = [ts[d] if v is None else len(v) for d, v in enumerate(sel)]
    t = terms.make("gather", tuple(vec_key(v) for v in sel), (val.t,), shape)
    rest = tuple(None if d in dims else val.vecs[d] for d in range(len(val.vecs)))
    return Val(t, rest)


def truncate(terms: TermStore, val: Val, dim: int, size: int) -> Val:
    """Cut dim `dim` of the term to its first `size` positions, keeping the selection
    (all selected positions lie below `size`). Two programs that select the same
    positions of terms of different extents (a head block of a fused projection in one,
    of the whole in the other) then contract against the same term."""
    ts = terms.shape(val.t)
    if ts[dim] == size:
        return val
    v = val.vecs[dim]
    if v is None or not len(v) or v.max() >= size:
        return materialize(terms, val, [dim])
    sel = [None] * len(ts)
    sel[dim] = np.arange(size, dtype=np.int64)
    shape = list(ts)
    shape[dim] = size
    t = terms.make("gather", tuple(vec_key(x) for x in sel), (val.t,), shape)
    vecs = list(val.vecs)
    vecs[dim] = None if v is None else canon_vec(v, size)
    return Val(t, tuple(vecs))


# ---------------------------------------------------------------- views

def view_term(terms: TermStore, op: str, attrs: tuple, t: int, shape) -> int:
    """A view of a term, with view chains collapsed and exact scales kept above views
    (``view(c·x) = c·view(x)``), so both programs agree."""
    inner = terms[t]
    if op in ("reshape", "permute") and inner.op == "lin" and len(inner.children) == 1 \
            and terms.shape(inner.children[0]) == inner.shape:
        return terms.make("lin", inner.attrs, (view_term(terms, op, attrs, inner.children[0], shape),), shape)
    if op == "reshape":
        if tuple(shape) == inner.shape:
            return t
        if inner.op == "reshape":
            return view_term(terms, "reshape", (tuple(shape),), inner.children[0], shape)
        return terms.make("reshape", (tuple(shape),), (t,), shape)
    if op == "permute":
        perm = attrs[0]
        if perm == tuple(range(len(perm))):
            return t
        if inner.op == "permute":
            composed = tuple(inner.attrs[0][p] for p in perm)
            return view_term(terms, "permute", (composed,), inner.children[0], shape)
        return terms.make("permute", attrs, (t,), shape)
    return terms.make(op, attrs, (t,), shape)


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


def _group_dims_units_left(old: Sequence[int], new: Sequence[int]):
    """The reshape's groups with each unit dim joined to the group before it (where
    `_group_dims` joins it to the one after): ``[s, 1, h] -> [s, h]`` as ``[s, 1] -> [s]``,
    ``[s, h] -> [s, 1, h]`` as ``[s] -> [s, 1]``."""
    groups = _group_dims(old, new)
    out = []
    for go, gn in groups:
        if out and len(go) > 1 and old[go[0]] == 1:
            out[-1] = (out[-1][0] + go[:1], out[-1][1])
            go = go[1:]
        if out and len(gn) > 1 and new[gn[0]] == 1:
            out[-1] = (out[-1][0], out[-1][1] + gn[:1])
            gn = gn[1:]
        out.append((go, gn))
    return out


def _group_dims(old: Sequence[int], new: Sequence[int]):
    """Pair up runs of old and new dims with equal products (the reshape's groups)."""
    groups, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        go, gn, po, pn = [], [], 1, 1
        if i < len(old):
            go.append(i); po *= old[i]; i += 1
        if j < len(new):
            gn.append(j); pn *= new[j]; j += 1
        while po != pn:
            if po < pn and i < len(old):
                go.append(i); po *= old[i]; i += 1
            elif j < len(new):
                gn.append(j); pn *= new[j]; j += 1
            else:
                raise ValueError(f"cannot reshape {list(old)} to {list(new)}")
        # absorb trailing unit dims into this group so groups stay non-empty
        while j < len(new) and new[j] == 1 and i >= len(old):
            gn.append(j); j += 1
        if not gn and groups:  # trailing old unit dims: part of the last group
            groups[-1] = (groups[-1][0] + go, groups[-1][1])
            continue
        groups.append((go, gn))
    return groups


def _divisors_from(n: int, lo: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted({d for d in small + [n // d for d in small] if d >= lo})


def _split_candidates(v: np.ndarray, b: int, total: int):
    """Ways to write v (indices into `total`) as outer*Tb + inner with inner of length b."""
    out = []
    if len(v) % b:
        return out
    rows = v.reshape(-1, b)
    for tb in _divisors_from(total, b):
        u, w = rows // tb, rows % tb
        if (u == u[:, :1]).all() and (w == w[:1, :]).all():
            out.append((tb, u[:, 0].copy(), w[0].copy()))
    return out


def reshape(terms: TermStore, val: Val, new_shape: Sequence[int]) -> Val:
    cur = shape_of(terms, val)
    new_shape = list(new_shape)
    if -1 in new_shape:
        k = new_shape.index(-1)
        new_shape[k] = prod(cur) // max(1, prod(s for s in new_shape if s != -1))
    if list(cur) == new_shape:
        return val
    if _mapped(terms, val):
        return at_positions(terms, val.t, flat_positions(terms, val).reshape(new_shape))
    ts = terms.shape(val.t)
    groupings = [_group_dims(cur, new_shape)]
    if _group_dims_units_left(cur, new_shape) != groupings[0]:
        groupings.append(_group_dims_units_left(cur, new_shape))
    built = [_reshape_options(terms, val, grouping, new_shape) for grouping in groupings]
    if built[0] is None:
        return reshape(terms, materialize(terms, val), new_shape)
    built = [b for b in built if b is not None]
    # prefer a split whose term the single-device program built, then one any program built;
    # else the plainest
    cands = [b for options in built for b in options]
    for reference in (True, False):
        for shape, vecs in cands:
            found = shape == ts or _reshape_built(terms, val.t, shape, reference)
            if found:
                return Val(view_term(terms, "reshape", (shape,), val.t, shape), vecs)
    shape, vecs = min((b for options in built for b in options), key=_selection_cost)  # the plainest selection
    return Val(view_term(terms, "reshape", (shape,), val.t, shape), vecs)


def _reshape_built(terms: TermStore, t: int, shape: tuple, reference: bool = False) -> bool:
    """Whether the term ``view_term`` would build for reshaping `t` to `shape` exists
    already (with `reference`: among the single-device program's values), found as
    ``view_term`` normalizes it (through an exact scale, a view chain), or as the completion
    of a partial product is viewed (a row-parallel rank's partial sum, all-reduced later)."""
    inner = terms[t]
    if inner.op == "lin" and len(inner.children) == 1 and terms.shape(inner.children[0]) == inner.shape:
        return _reshape_built(terms, inner.children[0], shape, reference)
    if inner.op == "dot" and inner.attrs[1] is not None:
        whole = terms.lookup("dot", (inner.attrs[0], None), inner.children)
        if whole is not None and _reshape_built(terms, whole, shape, reference):
            return True
    for base in dict.fromkeys((terms.reshaped_from(t), t)):  # a view's base, then the term itself
        if tuple(shape) == terms.shape(base):
            found = base
        else:
            found = terms.lookup("reshape", (tuple(shape),), (base,))
        if found is not None and (not reference or found in terms.reference):
            return True
    return False


def _reshape_options(terms: TermStore, val: Val, grouping, new_shape) -> list | None:
    """Every (term shape, layout) the reshaped selection can take, per the grouping."""
    ts = terms.shape(val.t)
    options: list[list[tuple[list[int], list[Vec]]]] = []
    for go, gn in grouping:
        total = prod(ts[d] for d in go)
        merged = np.zeros(1, dtype=np.int64)
        for d in go:
            merged = (merged[:, None] * ts[d] + vec_array(val.vecs[d], ts[d])[None, :]).ravel()
        # enumerate splits from the innermost new dim outwards
        partial = [([], [], merged, total)]
        for b in reversed([new_shape[d] for d in gn[1:]]):
            nxt = []
            for sizes, vecs, rem, tot in partial:
                cands = _split_candidates(rem, b, tot)
                if b == 1:  # a unit dim: a new dim of its own, or one position of a term dim split off
                    cands = [(1, rem, np.zeros(1, np.int64))] + [c for c in cands if 1 < c[0] <= tot]
                for tb, u, w in cands:
                    nxt.append(([tb] + sizes, [w] + vecs, u, tot // tb))
            partial = nxt
            if not partial:
                return None
        options.append([([tot] + sizes, [rem] + vecs) for sizes, vecs, rem, tot in partial])
    combos = [[]]
    for opts in options:
        combos = [c + [o] for c in combos for o in opts][:64]

    def build(combo):
        shape, vecs = [], []
        for sizes, vs in combo:
            shape += sizes
            vecs += [canon_vec(v, s) for v, s in zip(vs, sizes)]
        return tuple(shape), tuple(vecs)
    return [build(c) for c in combos]


def _selection_cost(shape_vecs) -> tuple:
    """Prefer splits that select whole dims, then contiguous blocks, then a selection of
    outer rather than inner dims, then coarse outer dims: both programs then pick the same
    split of a merged dim (e.g. [batch*heads] into [batch, heads] with a block of heads,
    not into [2*batch, heads/2] with a stride; a micro-batch of one row of [batch*seq]
    into [batch, seq] with that row, not into [1, batch*seq] with a block)."""
    shape, vecs = shape_vecs
    partial = sum(v is not None for v in vecs)
    strided = sum(v is not None and len(v) > 1 and not np.array_equal(np.diff(v), np.ones(len(v) - 1)) for v in vecs)
    return partial, strided, tuple(v is None for v in vecs), tuple(-s for s in reversed(shape))


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


# ---------------------------------------------------------------- position maps

MAX_MAPPED = 1 << 22  # elements: a bigger layout that is no grid is materialized instead


def flat_positions(terms: TermStore, val: Val) -> np.ndarray:
    """The flat positions in term ``val.t`` of `val`'s elements, laid out in `val`'s shape."""
    ts = terms.shape(val.t)
    flat = np.arange(prod(ts), dtype=np.int64).reshape(ts)
    return flat[np.ix_(*[vec_array(v, s) for v, s in zip(val.vecs, ts)])] if ts else flat


def _grid(m: np.ndarray, shape: tuple) -> Optional[tuple]:
    """Per-dim vectors when flat positions `m` into `shape` select a grid, dims in order."""
    if m.ndim != len(shape):
        return None
    coords = np.unravel_index(m, shape)
    vecs = []
    for d, c in enumerate(coords):
        line = c[tuple(slice(None) if k == d else 0 for k in range(m.ndim))]
        if not np.array_equal(c, np.broadcast_to(line.reshape([-1 if k == d else 1 for k in range(m.ndim)]), m.shape)):
            return None
        vecs.append(canon_vec(line, shape[d]))
    return tuple(vecs)


def at_positions(terms: TermStore, t: int, m: np.ndarray) -> Val:
    """The tensor of the elements at flat positions `m` of term `t`: a selection of `t`, or
    of the term `t` views (through permutes, reshapes and position maps), where they form a
    grid; else a position map of `t` (which later views compose with, down to a grid). An
    all_to_all's blocks reassembled are thus the selection the single device holds."""
    if terms[t].op == "take":  # a map of a map: one map of the term the first one views
        t, m = terms[t].children[0], np.frombuffer(terms[t].attrs[1], dtype=np.int64)[m]
    for level, level_m in view_levels(terms, t, m):
        vecs = _grid(level_m, terms.shape(level))
        if vecs is not None:
            return Val(level, vecs)
    return Val(terms.make("take", (m.shape, m.tobytes()), (t,), m.shape), (None,) * m.ndim)


def view_levels(terms: TermStore, t: int, m: np.ndarray):
    """(term, positions) for flat positions `m` of term `t` and, down its chain of views
    (position maps, permutes, reshapes), the same elements' positions in each viewed term."""
    while True:
        yield t, m
        term = terms[t]
        if term.op == "take":
            m = np.frombuffer(term.attrs[1], dtype=np.int64)[m]
        elif term.op == "permute":
            inner = terms.shape(term.children[0])
            m = np.arange(prod(inner), dtype=np.int64).reshape(inner).transpose(term.attrs[0]).ravel()[m]
        elif term.op != "reshape":  # a reshape keeps flat positions
            return
        t = term.children[0]


def _mapped(terms: TermStore, val: Val) -> bool:
    """Whether `val` is a position map's selection that views must compose exactly."""
    return terms[val.t].op == "take" and prod(shape_of(terms, val)) <= MAX_MAPPED


def _settled(terms: TermStore, val: Val) -> Val:
    """A selection of a position map as the plain selection it may have become (a block
    of an all_to_all's receive buffer that is one sender's piece)."""
    return at_positions(terms, val.t, flat_positions(terms, val)) if _mapped(terms, val) else val


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
    from .padding import common_padding
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
