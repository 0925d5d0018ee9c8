"""Layouts as position maps: a tensor's elements as flat positions of a term, composed
through views down to a grid selection where they form one (see :mod:`.layout`)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .layout_base import Val, canon_vec, prod, shape_of, vec_array
from .terms import TermStore

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
