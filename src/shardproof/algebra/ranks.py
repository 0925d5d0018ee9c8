"""Lemmas for collectives: what the sum (max, min) of per-rank terms equals.

``sum_over_ranks`` normalizes Σ_r t_r: identical terms give N·t, linear ops distribute,
partial reductions over a partition of a dim complete to the full reduction, and
user-declared partial inputs recombine. Anything else stays an opaque ``sum_ranks``
term, which matches nothing in the single-device program (so the engine reports it).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Sequence

import numpy as np

from .compute import pair_set, scale
from .layout import Val, concat, materialize, same_vec, unmaterialize, view_term
from .padding_base import is_zero
from .terms import TermStore

# op -> which child positions a sum over ranks distributes into
#   "all": linear in all children jointly (add, sub, views, gathers, concatenation)
#   "one": linear in each child separately (mul, dot): the others must agree across ranks
#   "first": linear in the first child only (division by a common divisor)
LINEARITY: dict[str, str] = {}
# partial reductions whose pieces a collective of this kind completes
COMPLETES: dict[str, str] = {"sum": "sum", "dot": "sum", "amax": "max", "amin": "min"}
# extra pattern lemmas: (ranks' terms) -> combined term or None
RANK_SUM_LEMMAS: list[Callable[[TermStore, list[int]], int | None]] = []


def _union(overs: Sequence[bytes | None], size: int, disjoint: bool):
    """The index set the pieces cover together (None: all of the dim), or False when a
    piece is whole or, for a sum, pieces overlap (an element would count twice)."""
    if any(o is None for o in overs):
        return False
    idx = np.concatenate([np.frombuffer(o, dtype=np.int64) for o in overs])
    union = np.unique(idx)
    if disjoint and len(union) != len(idx):
        return False
    return None if np.array_equal(union, np.arange(size)) else union.tobytes()


def complete_partials(terms: TermStore, ts: list[int], kind: str) -> int | None:
    """Pieces of one reduction over disjoint parts (sum) or any parts (max/min) of a dim:
    the reduction over their union (whole when they cover the dim)."""
    first = terms[ts[0]]
    if COMPLETES.get(first.op) != kind:
        return None
    pieces = [terms[t] for t in ts]
    if any(p.op != first.op or p.children != first.children for p in pieces):
        return None
    if first.op == "dot":
        spec, _ = first.attrs
        overs = [p.attrs[1] for p in pieces]
        if any(p.attrs[0] != spec for p in pieces) or any(o is None for o in overs):
            return None
        varying = [k for k in range(len(spec[2])) if len({o[k] for o in overs}) > 1]
        if len(varying) != 1:
            return None
        k = varying[0]
        i, j = spec[2][k], spec[3][k]
        asize, bsize = terms.shape(first.children[0])[i], terms.shape(first.children[1])[j]
        pairs = np.concatenate([np.frombuffer(o[k], dtype=np.int64).reshape(-1, 2) for o in overs])
        whole = pair_set(pairs[:, 0], asize, pairs[:, 1], bsize)
        rest = tuple(whole if m == k else o for m, o in enumerate(overs[0]))
        rest = None if all(o is None for o in rest) else rest
        return terms.make("dot", (spec, rest), first.children, first.shape)
    dims, keepdim, _, *extra = first.attrs
    overs = [p.attrs[2] for p in pieces]
    if any(p.attrs[:2] != first.attrs[:2] or tuple(p.attrs[3:]) != tuple(extra) for p in pieces):
        return None
    if any(o is None for o in overs):
        return None
    src = terms.shape(first.children[0])
    varying = [k for k in range(len(dims)) if len({o[k] for o in overs}) > 1]
    if len(varying) > 1:
        return _complete_by_dims(terms, ts, overs, varying, kind)
    if len(varying) != 1:
        return None
    k = varying[0]
    union = _union([o[k] for o in overs], src[dims[k]], disjoint=(kind == "sum"))
    if union is False:
        return None
    rest = tuple(union if i == k else o for i, o in enumerate(overs[0]))
    rest = None if all(o is None for o in rest) else rest
    return terms.make(first.op, (dims, keepdim, rest, *extra), first.children, first.shape)


def _complete_by_dims(terms: TermStore, ts: list[int], overs: list, varying: list[int], kind: str) -> int | None:
    """Pieces over blocks of a grid (several reduced dims split: a batch row and a sequence
    shard per rank): pieces that hold the same positions on every dim but one complete along
    that dim first (a union over one dim, disjoint for sums, exactly as for a single split dim);
    the results, which then differ on fewer dims, complete in turn. A product of position sets
    summed over a disjoint cover of each factor is the sum over the product: exact."""
    for k in varying:
        groups: dict[tuple, list[int]] = {}
        for t, o in zip(ts, overs):
            groups.setdefault(tuple(x for m, x in enumerate(o) if m != k), []).append(t)
        if len(groups) == len(ts):
            continue  # no two pieces differ on k alone
        merged = []
        for members in groups.values():
            whole = members[0] if len(members) == 1 else complete_partials(terms, members, kind)
            if whole is None:
                return None
            merged.append(whole)
        return merged[0] if len(merged) == 1 else complete_partials(terms, merged, kind)
    return None


def _sum_of_multiples(terms: TermStore, ts: list[int]) -> int | None:
    """``c_1 x + ... + c_n x`` is ``(c_1 + ... + c_n) x`` (ranks counting uneven shares of
    one repeated element: a fill's local extents); constant fills add up to one."""
    fills = [terms[t] for t in ts]
    if all(f.op == "fill" and f.shape == fills[0].shape and f.attrs[1:] == fills[0].attrs[1:]
           and isinstance(f.attrs[0], (int, float, Fraction)) and not isinstance(f.attrs[0], bool) for f in fills):
        return terms.make("fill", (sum(f.attrs[0] for f in fills),) + fills[0].attrs[1:], (), fills[0].shape)

    def split(t):
        term = terms[t]
        return (term.children[0], term.attrs[0]) if term.op == "scale" else (t, 1)
    parts = [split(t) for t in ts]
    if len({p[0] for p in parts}) != 1:
        return None
    return scale(terms, parts[0][0], sum(Fraction(c) for _, c in parts))


def _linear_form(term) -> bool:
    """Whether a term of a LINEARITY op is linear as built: elementwise sub/div terms carry
    their constant operands and keywords in a template (attrs); ``x - c`` is affine
    (Σ_r (x_r - c) = x - N·c), ``c / x`` and a rounded division are not linear at all."""
    if term.op not in ("sub", "div") or not term.attrs or not isinstance(term.attrs[-1], tuple):
        return True
    pos, kw = term.attrs[:-1], dict(term.attrs[-1])
    if kw.get("rounding_mode") is not None:
        return False
    return all(p == "$" for p in pos) if term.op == "sub" else bool(pos) and pos[0] == "$"


def sum_terms(terms: TermStore, ts: list[int]) -> int:
    n = len(ts)
    if all(t == ts[0] for t in ts):
        return scale(terms, ts[0], n)
    done = complete_partials(terms, ts, "sum")
    if done is not None:
        return done
    done = _sum_of_multiples(terms, ts)
    if done is not None:
        return done
    for lemma in RANK_SUM_LEMMAS:
        done = lemma(terms, ts)
        if done is not None:
            return done
    first = terms[ts[0]]
    same_shape = all(terms[t].op == first.op and terms[t].attrs == first.attrs
                     and len(terms[t].children) == len(first.children)
                     and all(terms[c].shape == terms[c0].shape for c, c0 in zip(terms[t].children, first.children))
                     for t in ts)  # children summed position by position: they must be alike (a cat of uneven pieces is not)
    if same_shape and first.op == "scale":
        return scale(terms, sum_terms(terms, [terms[t].children[0] for t in ts]), first.attrs[0])
    kind = LINEARITY.get(first.op) if _linear_form(first) else None
    if same_shape and kind == "all":
        kids = tuple(sum_terms(terms, [terms[t].children[i] for t in ts]) for i in range(len(first.children)))
        if first.op in ("reshape", "permute"):  # views of the sum, collapsed as views are
            return view_term(terms, first.op, first.attrs, kids[0], first.shape)
        return terms.make(first.op, first.attrs, kids, first.shape)
    if same_shape and kind in ("one", "first"):
        differing = [i for i in range(len(first.children)) if len({terms[t].children[i] for t in ts}) > 1]
        if differing == [0] or kind == "one" and len(differing) == 1:
            i = differing[0]
            kids = list(first.children)
            kids[i] = sum_terms(terms, [terms[t].children[i] for t in ts])
            return terms.make(first.op, first.attrs, tuple(kids), first.shape)
    return terms.make("sum_ranks", (), tuple(ts), first.shape)


def extreme_terms(terms: TermStore, ts: list[int], kind: str) -> int:
    """max or min over ranks."""
    if all(t == ts[0] for t in ts):
        return ts[0]
    done = complete_partials(terms, ts, kind)
    if done is not None:
        return done
    return terms.make(f"{kind}_ranks", (), tuple(ts), terms[ts[0]].shape)


def _aligned_cats(terms: TermStore, vals: list[Val]):
    """(dim, per-rank pieces) when every value is a whole ``cat`` along one dim with the
    same piece sizes (a flat buffer of several tensors, e.g. FSDP's reduce-scatter input)."""
    cats = [terms[v.t] for v in vals]
    if any(c.op != "cat" or any(x is not None for x in v.vecs) for c, v in zip(cats, vals)):
        return None
    dim = cats[0].attrs[0]
    sizes = [[terms.shape(p)[dim] for p in c.children] for c in cats]
    if any(c.attrs[0] != dim or s != sizes[0] for c, s in zip(cats, sizes)):
        return None
    return dim, [[unmaterialize(terms, Val(p, (None,) * len(v.vecs))) for p in c.children] for c, v in zip(cats, vals)]


def combine(terms: TermStore, vals: list[Val], reduce_op: str) -> Val:
    """The value an all_reduce with `reduce_op` produces from the ranks' values. Reductions
    are elementwise, so aligned concatenations reduce piece by piece."""
    aligned = _aligned_cats(terms, vals)
    if aligned is not None:
        dim, pieces = aligned
        return concat(terms, [combine(terms, [p[k] for p in pieces], reduce_op) for k in range(len(pieces[0]))], dim)
    first = vals[0]
    if not all(len(v.vecs) == len(first.vecs) and all(same_vec(a, b) for a, b in zip(v.vecs, first.vecs))
               for v in vals):
        vals = [materialize(terms, v) for v in vals]
        first = vals[0]
    ts = [v.t for v in vals]
    op = reduce_op.lower()
    if op in ("sum", "avg"):  # a rank holding only zero padding adds nothing
        ts = [t for t in ts if not is_zero(terms, t)] or ts[:1]
        if op == "avg":
            return Val(scale(terms, sum_terms(terms, ts), Fraction(1, len(vals))), first.vecs)
    if op == "sum":
        t = sum_terms(terms, ts)
    elif op == "avg":
        t = scale(terms, sum_terms(terms, ts), Fraction(1, len(ts)))
    elif op in ("max", "min"):
        t = extreme_terms(terms, ts, op)
    else:
        t = terms.make(f"{op}_ranks", (), tuple(ts), terms[ts[0]].shape)
    return Val(t, first.vecs)
