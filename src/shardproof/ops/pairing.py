"""Pairings of a batch (head) dim along which two operands hold different term positions:
attention heads cut from one fused projection (a shift), grouped-query k/v heads repeated to
the query heads (a grouping). A contraction or attention whose operands pair by such a rule
is exact for any selection of the lhs positions (the pairing is part of the term)."""
from __future__ import annotations

from weakref import WeakKeyDictionary

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val, unmaterialize, vec_array
from ..algebra.padding import pad_join, padded_batch
from ..algebra.terms import TermStore


def fits(pairing: tuple, qpos: np.ndarray, pos: np.ndarray, qsize: int, size: int) -> bool:
    """Whether k/v positions `pos` are paired with q positions `qpos` by `pairing`."""
    kind = pairing[0]
    if kind == "shift":
        return size == qsize and np.array_equal(pos, qpos + pairing[1])
    if kind == "group":
        return size == pairing[1] and qsize % size == 0 and np.array_equal(pos, qpos * size // qsize)
    return kind == "group_at" and np.array_equal(pos, pairing[1] + qpos // pairing[2])


def pairing_of(qpos: np.ndarray, pos: np.ndarray, qsize: int, size: int) -> tuple | None:
    """How attention pairs q heads with one k/v operand's heads along a batch/head dim,
    as a rule on term positions that both programs satisfy: ``("shift", c)`` when k/v
    heads are q's positions shifted by c (heads cut from one fused projection),
    ``("group", n)`` when q position p uses k/v position p * n // |q| (grouped-query
    attention, k/v repeated to q's heads), ``("group_at", c, g)`` when q position p uses
    k/v position c + p // g (grouped-query heads cut from one fused projection, the k/v
    heads after all q heads; the smallest g that fits). None: no such rule."""
    if len(pos) != len(qpos) or not len(pos):
        return None
    if size == qsize and (pos - qpos == pos[0] - qpos[0]).all():
        return ("shift", int(pos[0] - qpos[0]))
    if qsize % size == 0 and np.array_equal(pos, qpos * size // qsize):
        return ("group", size)
    order = np.argsort(qpos, kind="stable")
    if len(np.unique(pos)) == len(pos) and len(pos) > 1 or (np.diff(pos[order]) < 0).any():
        return None  # q heads sharing a k/v head, in order: anything else is not a grouping
    for g in range(2, qsize + 1):
        c = int(pos[0] - qpos[0] // g)
        if np.array_equal(pos, c + qpos // g):
            return ("group_at", c, g)
    return None


_BUILT: WeakKeyDictionary = WeakKeyDictionary()  # term store -> (children, dims) -> batch pairings built


def paired_dot(terms: TermStore, a: Val, b: Val, lhs_batch, rhs_batch, lhs_contract, rhs_contract) -> Val:
    """A contraction (the block-matrix lemma of :func:`compute.dot`). A batch dim where the
    operands hold different positions is kept exact when the positions pair by a rule
    (heads cut from one fused projection: a shift; grouped-query k/v heads repeated to
    the query heads: a grouping); a pairing the other program already built over the
    same operands is preferred, so both build the same term. Zero padding along a batch
    dim (:mod:`shardproof.algebra.padding`) is set apart first: its products are zero."""
    a, b = unmaterialize(terms, a), unmaterialize(terms, b)
    padded = padded_batch(terms, a, b, lhs_batch, rhs_batch)
    if padded is not None:
        k, a_real, b_real, is_pad, offsets, size = padded
        real = paired_dot(terms, a_real, b_real, lhs_batch, rhs_batch, lhs_contract, rhs_contract)
        return pad_join(terms, real, k, offsets, is_pad, size)
    found = []
    for i, j in zip(lhs_batch, rhs_batch):
        asize, bsize = terms.shape(a.t)[i], terms.shape(b.t)[j]
        apos, bpos = vec_array(a.vecs[i], asize), vec_array(b.vecs[j], bsize)
        if asize == bsize and np.array_equal(apos, bpos):
            found.append(None)
            continue
        if (asize == 1) != (bsize == 1):  # one operand's term has no such dim (expanded from size 1): a
            found.append(None)            # broadcast, which compute.dot contracts as such, however it was built
            continue
        pairing = pairing_of(apos, bpos, asize, bsize)
        if pairing is None:
            a, b = layout.materialize(terms, a, [i]), layout.materialize(terms, b, [j])
            found.append(None)
        else:
            found.append((pairing, apos, bpos, asize, bsize))
    if all(f is None for f in found):
        return compute.dot(terms, a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract)
    key = (a.t, b.t, tuple(lhs_batch), tuple(rhs_batch), tuple(lhs_contract), tuple(rhs_contract))
    built = _BUILT.setdefault(terms, {}).setdefault(key, [])
    holds = lambda ps: all((f is None) == (p is None) and (f is None or fits(p, *f[1:]))  # noqa: E731
                          for p, f in zip(ps, found))
    pairings = next((ps for ps in built if holds(ps)), None)
    if pairings is None:
        pairings = tuple(None if f is None else f[0] for f in found)
        built.append(pairings)
    return compute.dot(terms, a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract, pairings)


