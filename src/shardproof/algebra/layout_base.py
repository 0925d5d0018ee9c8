"""Layouts, the basics: ``Val(t, vecs)`` (the elements of term `t` a tensor holds, one
index vector per dimension, ``None`` for a whole one), shapes and index vectors,
materializing a selection into a gather term, and view terms (see :mod:`.layout`)."""
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
