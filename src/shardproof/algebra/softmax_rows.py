"""Facts about attention score rows that the online-softmax lemma (:mod:`.online_softmax`)
relies on, decided exactly on the terms: the values of input-free terms (causal masks built
from aranges), which scores are finite and which masked (-inf), per row and key set, and the
masked scores a block mask of equal values stands for. No I/O."""
from __future__ import annotations

import numpy as np

from .layout import Val
from .terms import TermStore

NEG_INF = float("-inf")
FINITE_OPS = {"input", "lin", "dot", "reshape", "permute", "gather", "expand", "mul", "scale", "cat"}


def const_value(terms: TermStore, t: int, memo: dict | None = None):
    """The value of an input-free term (masks and positions built from aranges), or None."""
    memo = {} if memo is None else memo
    if t in memo:
        return memo[t]
    term = terms[t]
    kids = [const_value(terms, c, memo) for c in term.children]
    out = None
    if all(k is not None for k in kids):
        try:
            out = _const_op(term, kids)
        except (ValueError, TypeError, IndexError):
            out = None
        if out is not None and tuple(np.shape(out)) != term.shape:
            out = None
    memo[t] = out
    return out


def _template_args(attrs, kids):
    it = iter(kids)
    return [next(it) if a == "$" else a for a in attrs[:-1]]


_COMPARE = {"gt": np.greater, "lt": np.less, "ge": np.greater_equal, "le": np.less_equal, "eq": np.equal,
            "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or}


def _const_op(term, kids):
    op, a = term.op, term.attrs
    if op == "arange":
        if any(k in ("start", "end", "step") for k, _ in a[-1]):  # bounds passed by keyword: not read here
            return None
        return np.arange(*[float(x) for x in a[:-1]])
    if op == "const":
        return np.frombuffer(a[2], dtype=np.dtype(a[0])).reshape(a[1]).astype(np.float64)
    if op == "fill":
        return np.full(term.shape, float(a[0]))
    if op == "reshape":
        return np.reshape(kids[0], term.shape)
    if op == "expand":
        return np.broadcast_to(kids[0], term.shape)
    if op == "permute":
        return np.transpose(kids[0], a[0])
    if op == "gather":
        sel = [np.arange(n) if v is None else np.frombuffer(v, dtype=np.int64) for v, n in zip(a, np.shape(kids[0]))]
        return kids[0][np.ix_(*sel)]
    if op == "cat" and len(a) == 1:
        return np.concatenate(kids, axis=a[0])
    if op == "add_const":
        return kids[0] + float(a[0])
    if op == "lin":
        return sum(float(c) * k for c, k in zip(a, kids))
    if op in _COMPARE and len(term.children) >= 1:
        return _COMPARE[op](*_template_args(a, kids))
    if op == "logical_not":
        return np.logical_not(kids[0])
    return None


def finite_form(terms: TermStore, t: int, memo: dict | None = None) -> bool:
    """Whether a term is finite for all finite inputs (linear ops and contractions of inputs)."""
    memo = {} if memo is None else memo
    if t not in memo:
        term = terms[t]
        if term.op == "const":
            ok = bool(np.isfinite(np.frombuffer(term.attrs[2], dtype=np.dtype(term.attrs[0]))).all())
        else:
            ok = term.op in FINITE_OPS and all(finite_form(terms, c, memo) for c in term.children)
        memo[t] = ok
    return memo[t]


def unmasked(terms: TermStore, s: int):
    """Boolean array (broadcast to the shape of `s`): where the score term is a finite
    number rather than a masked -inf; None when not known."""
    term = terms[s]
    if finite_form(terms, s):
        return np.ones(term.shape, dtype=bool)
    if term.op == "where" and len(term.children) == 2 and len(term.attrs) == 4:
        mask, x = term.children
        if not finite_form(terms, x):
            return None
        m = const_value(terms, mask)
        if m is None:
            return None
        if term.attrs[:3] == ("$", NEG_INF, "$"):
            keep = ~m.astype(bool)
        elif term.attrs[:3] == ("$", "$", NEG_INF):
            keep = m.astype(bool)
        else:
            return None
        return np.broadcast_to(keep, term.shape)
    return None


def key_set(n: int, keys) -> np.ndarray:
    inside = np.zeros(n, dtype=bool)
    inside[np.arange(n) if keys is None else keys] = True
    return inside


def row_facts(terms: TermStore, s: int, keys):
    """(some key of K is unmasked, every key outside K is masked) per row of `s`, or None."""
    keep = unmasked(terms, s)
    if keep is None:
        return None
    inside = key_set(terms.shape(s)[-1], keys)
    return (keep & inside).any(-1), ~(keep & ~inside).any(-1)


def _local(terms: TermStore, t: int, vecs, nd: int):
    """A constant term's values at the positions `vecs` (right-aligned to `nd` dims)."""
    value = const_value(terms, t)
    if value is None:
        return None
    idx = [np.arange(n) if v is None else np.asarray(v) for v, n in zip(vecs, value.shape)]
    local = value[np.ix_(*idx)] if idx else value
    return local.reshape((1,) * (nd - local.ndim) + local.shape)


def masked_scores(terms: TermStore, x: Val, mask: Val):
    """``masked_fill(x, mask, -inf)`` as ``Val(where(M, -inf, X), x.vecs)`` for a where-term
    over the same X whose constant mask M has, at x's positions, the values `mask` has at its
    own: equal elementwise, so the same value. None when there is no such term."""
    nd = len(x.vecs)
    here = _local(terms, mask.t, mask.vecs, nd)
    if here is None or here.ndim > nd:
        return None
    for w in terms.of_op("where"):
        term = terms[w]
        if term.attrs[:3] != ("$", NEG_INF, "$") or len(term.children) != 2 or term.children[1] != x.t:
            continue
        m = term.children[0]
        ms = terms.shape(m)
        if len(ms) > nd or any(a not in (1, b) for a, b in zip(ms, terms.shape(x.t)[nd - len(ms):])):
            continue
        vecs = tuple(None if ms[k] == 1 else x.vecs[nd - len(ms) + k] for k in range(len(ms)))
        there = _local(terms, m, vecs, nd)
        if there is None:
            continue
        try:
            shape = np.broadcast_shapes(here.shape, there.shape, tuple(len(v) if v is not None else n
                                                                       for v, n in zip(x.vecs, terms.shape(x.t))))
        except ValueError:
            continue
        if np.array_equal(np.broadcast_to(here.astype(bool), shape), np.broadcast_to(there.astype(bool), shape)):
            return Val(w, x.vecs)
    return None


def held_rows(arr: np.ndarray, vecs) -> bool:
    idx = [np.arange(n) if v is None else np.asarray(v) for v, n in zip(vecs, arr.shape)]
    return bool(arr[np.ix_(*idx)].all()) if all(len(i) for i in idx) else True
