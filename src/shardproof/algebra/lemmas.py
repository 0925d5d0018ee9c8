"""Term rewrites (normal forms) and cross-rank lemmas that are patterns, not op rules.

Vocab-parallel lookup (Megatron ``VocabParallelEmbedding``, vLLM's masked embedding):
rank r owns rows [lo, hi) of the table, masks ids outside its range, looks up locally
and zeroes the masked rows; summed over ranks whose ranges tile the table this is the
plain lookup. Each step is a general identity, stated as a pattern:

1. ``embedding(W[lo:hi], where(ids<lo | ids>=hi, c, ids-lo))`` equals
   ``embedding(W, ids)`` wherever ``lo <= ids < hi``        -> ``lookup_in(W, ids, lo, hi)``
2. ``where(ids<lo | ids>=hi, 0, lookup_in(...))`` is zero outside the range
                                                           -> ``range_lookup(W, ids, lo, hi)``
3. ``Σ_r range_lookup(W, ids, lo_r, hi_r)`` over ranges tiling W's rows is ``embedding(W, ids)``
   (ids index W, so each lies in exactly one range).
"""
from __future__ import annotations

import numpy as np

from .patterns import Const, P, V, first_match, match, through_views
from .ranks import RANK_SUM_LEMMAS
from .terms import TermStore, rewrite

OUTSIDE = P("or", P("lt", V("ids"), _1=Const("lo")), P("ge", V("ids"), _1=Const("hi")))
MASKED_IDS = P("where", OUTSIDE, P("sub", V("ids"), _1=Const("lo")))
ROWS = P("gather", V("W"), _0=Const("rows"), _1=None)


@rewrite("embedding")
def _lookup_in_range(terms: TermStore, attrs, children, shape):
    table, ids = children
    env = match(terms, table, ROWS)
    env = env and match(terms, ids, MASKED_IDS, env)
    if not env or not isinstance(env["lo"], int) or not isinstance(env["hi"], int):
        return None
    rows = np.frombuffer(env["rows"], dtype=np.int64)
    if not np.array_equal(rows, np.arange(env["lo"], env["hi"])):
        return None
    return terms.make("lookup_in", (env["lo"], env["hi"]), (env["W"], env["ids"]), shape)


@rewrite("where")
def _zero_outside_range(terms: TermStore, attrs, children, shape):
    if len(children) != 2 or attrs[1] != 0:
        return None
    mask, value = children
    inner = terms[value]
    if inner.op != "lookup_in":
        return None
    lo, hi = inner.attrs
    env = first_match(terms, mask, through_views(OUTSIDE), {"ids": inner.children[1], "lo": lo, "hi": hi})
    if env is None:
        return None
    return terms.make("range_lookup", inner.attrs, inner.children, shape)


def _tiled_lookups(terms: TermStore, ts: list[int]):
    pieces = [terms[t] for t in ts]
    if any(p.op != "range_lookup" or p.children != pieces[0].children for p in pieces):
        return None
    table = pieces[0].children[0]
    ranges = sorted(p.attrs for p in pieces)
    if ranges[0][0] != 0 or ranges[-1][1] != terms.shape(table)[0] \
            or any(a[1] != b[0] for a, b in zip(ranges, ranges[1:])):
        return None
    return terms.make("embedding", (), pieces[0].children, pieces[0].shape)


RANK_SUM_LEMMAS.append(_tiled_lookups)
