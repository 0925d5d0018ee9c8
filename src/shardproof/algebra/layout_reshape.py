"""Layouts through reshapes: a reshape's dim groups, the ways a selection splits across
them, and the choice of split both programs agree on (see :mod:`.layout`)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .layout_base import Val, Vec, canon_vec, materialize, prod, shape_of, vec_array, view_term
from .layout_maps import _mapped, at_positions, flat_positions
from .terms import TermStore


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
