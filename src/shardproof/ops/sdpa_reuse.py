"""Attention operands that are selections of one fused projection (q, k and v as heads of one
term, torchtitan's fused ``wqkv``): each program materializes its own selection of heads, so a
rank's 4 query heads would be a gather of its own, not a part of the single device's 8.

When an earlier program (the single device's, built first) materialized operands over the same
terms, and each of this program's (q, k, v) head triples is one of its triples, this program's
operands are that selection of the earlier ones: exact, since ``q[i], k[i], v[i]`` are then the
earlier operands' heads ``j`` with the same positions, and attention is exact on any common
selection of its head dim."""
from __future__ import annotations

from weakref import WeakKeyDictionary

import numpy as np

from ..algebra import layout
from ..algebra.layout import Val

_MATERIALIZED: WeakKeyDictionary = WeakKeyDictionary()  # term store -> key -> [(positions, operands)]


def _key(terms, ops: list, d: int) -> tuple:
    """The operands' terms and their selections on every dim but `d`."""
    return (d,) + tuple((o.t, tuple(layout.vec_key(v) for i, v in enumerate(o.vecs) if i != d)) for o in ops)


def _positions(terms, ops: list, d: int) -> list:
    return [layout.vec_array(o.vecs[d], terms.shape(o.t)[d]) for o in ops]


def earlier_selection(terms, ops: list, d: int):
    """`ops` as a common selection along `d` of operands an earlier program materialized, else None."""
    pos = _positions(terms, ops, d)
    for built_pos, mats in _MATERIALIZED.get(terms, {}).get(_key(terms, ops, d), []):
        where = {}
        for j, triple in enumerate(zip(*(p.tolist() for p in built_pos))):
            where.setdefault(triple, j)
        idx = [where.get(triple) for triple in zip(*(p.tolist() for p in pos))]
        if any(i is None for i in idx):
            continue
        sel = layout.canon_vec(np.asarray(idx, dtype=np.int64), terms.shape(mats[0].t)[d])
        return [Val(m.t, m.vecs[:d] + (sel,) + m.vecs[d + 1:]) for m in mats]
    return None


def record(terms, ops: list, mats: list, d: int) -> None:
    """Remember that `ops` were materialized along `d` as `mats`."""
    _MATERIALIZED.setdefault(terms, {}).setdefault(_key(terms, ops, d), []).append((_positions(terms, ops, d), mats))
