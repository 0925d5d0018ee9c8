"""A sum over a dim that indexes the pieces of a concatenation, as the sum of those pieces.

``x = cat(p_0, ..., p_{k-1})`` along dim c, viewed with dim c split into factors, and summed
over one factor of that split: each index i of the summed factor selects the positions of c
whose digit there is i, so the sum is ``Σ_i x[positions_i]`` (exact: a sum over a dim is the
sum of its slices). Each slice is cut into runs within the pieces (``layout.piece_runs``); slices
whose runs align are summed run by run, and each run's sum is
normalized exactly as a collective's sum of the ranks' values is (``ranks.combine``): equal
parts scale, linear ops with the same other operands distribute, pieces of one reduction over
a partition complete to the whole reduction. So complementary partial sums, each carried
through the same linear map on its own rank and brought together by an all_to_all before the
sum (a repeated KV head's gradient under Ulysses: each rank sums its own query heads, RoPE's
backward multiplies, the repeat's backward adds the replicas) meet the single device's map of
the whole sum. Where the slices do not combine (the sum would be an opaque ``sum_ranks``), the
plain reduction stands.

Whole sums also take one normal form however a program nests them (term rewrites below): a sum
of a sum is one sum; a sum moves under a concatenation along another dim (a plain one: a
padding cat's sum is ``padding.py``'s, which keeps the padding marked), a selection of other
dims and a zero fill; a factor constant along the summed dims moves out of it. Soundness:
tests/harness/test_sum_pieces_vs_torch.py (torch-judged, with twins); gloo-labelled programs:
tests/test_sum_pieces_cases.py.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .compute import SUM_HOOKS
from .layout import Val, canon_vec, concat, piece_runs, reshape, shape_of, take, view_term
from .lemmas import EXACT_DIV, _product, merged_groups
from .ranks import combine
from .terms import TermStore, rewrite

MAX_SLICES = 64  # extent of the summed factor split into slices; larger sums stay plain reductions


def sum_of_viewed_pieces(terms: TermStore, val: Val, dims: Sequence[int], keepdim: bool) -> Optional[Val]:
    """``sum(view(cat(pieces)), d)`` over a factor `d` of the view's split of the cat dim, as the
    normalized sum of the slices (module doc); None when that does not apply or combine."""
    if len(dims) != 1 or val.vecs[dims[0]] is not None:
        return None
    d = dims[0]
    term = terms[val.t]
    viewed = term.op == "reshape"
    base = term.children[0] if viewed else val.t
    if terms[base].op != "cat":
        return None
    c = terms[base].attrs[0]
    src, view = terms.shape(base), term.shape
    groups = merged_groups(view, src) if viewed else [[j] for j in range(len(src))]
    if groups is None or d not in groups[c]:
        return None
    group = groups[c]
    n = view[d]
    if not 2 <= n <= MAX_SLICES:
        return None
    grid = np.arange(src[c], dtype=np.int64).reshape([view[j] for j in group])
    k = group.index(d)
    # each slice cut into its runs within the pieces; slices whose runs align sum run by run
    slices = [_runs(terms, base, c, np.take(grid, i, axis=k).ravel()) for i in range(n)]
    if len({tuple(shape_of(terms, r)[c] for r in runs) for runs in slices}) != 1:
        return None
    if all(len({runs[r].t for runs in slices}) == 1 for r in range(len(slices[0]))):
        return None  # slices of one term: the plain reduction is the normal form
    before = len(terms.terms)
    sums = [combine(terms, [runs[r] for runs in slices], "sum") for r in range(len(slices[0]))]
    if any(_opaque_sum(terms, v.t, before) for v in sums):
        return None
    summed = sums[0] if len(sums) == 1 else concat(terms, sums, c)
    out = [s for j, s in enumerate(view) if j != d or keepdim]
    if keepdim:
        out[d] = 1
    whole = reshape(terms, summed, out)
    # the value's selection of the other dims, taken from the sum of the whole (a sum over
    # one dim commutes with selecting the others)
    kept = [(j if keepdim or j < d else j - 1, v) for j, v in enumerate(val.vecs) if j != d and v is not None]
    for j, v in kept:
        whole = take(terms, whole, j, v)
    return whole


SUM_HOOKS.append(sum_of_viewed_pieces)


def _runs(terms: TermStore, base: int, c: int, positions: np.ndarray) -> list[Val]:
    """Positions `positions` (in order) of concatenation `base` along its dim `c`, as the runs
    of consecutive positions within one piece each (layouts of the pieces)."""
    vecs = [None] * len(terms.shape(base))
    vecs[c] = canon_vec(positions, terms.shape(base)[c])
    return piece_runs(terms, Val(base, tuple(vecs)), c)


def _opaque_sum(terms: TermStore, t: int, before: int) -> bool:
    """Whether term `t` is, or newly built terms under it hold, a ``sum_ranks`` (a sum the
    normalization could not combine): ids below `before` existed already and are not walked."""
    stack, seen = [t], set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if terms[u].op == "sum_ranks":
            return True
        if u >= before:
            stack.extend(terms[u].children)
    return False


# ---------------------------------------------------------------- sums in normal form

@rewrite("sum")
def _sum_of_sum(terms, attrs, children, shape):
    """A whole sum of a whole sum is one sum over both sets of dims:
    ``sum(sum(x, A), B) = sum(x, A ∪ B)`` (B renumbered to x's dims), viewed as the result
    (a repeat's backward summed in two steps: each rank's copies, then the ranks' replicas)."""
    dims_b, keep_b, over_b, *extra = attrs
    inner = terms[children[0]]
    if inner.op != "sum" or over_b is not None or inner.attrs[2] is not None or tuple(inner.attrs[3:]) != tuple(extra):
        return None
    dims_a, keep_a = inner.attrs[:2]
    x = inner.children[0]
    nd = len(terms.shape(x))
    rest = list(range(nd)) if keep_a else [d for d in range(nd) if d not in dims_a]
    union = tuple(sorted(set(dims_a) | {rest[b] for b in dims_b}))
    keep = keep_a and keep_b
    reduced = [1 if d in union else n for d, n in enumerate(terms.shape(x))] if keep else \
        [n for d, n in enumerate(terms.shape(x)) if d not in union]
    t = terms.make("sum", (union, keep, None, *extra), (x,), reduced)
    return view_term(terms, "reshape", (tuple(shape),), t, shape)


def _constant_along(terms: TermStore, t: int, dims, nd: int) -> bool:
    """Whether term `t`, broadcast (right-aligned) to `nd` dims, has extent 1 on every dim of `dims`."""
    shape = terms.shape(t)
    lead = nd - len(shape)
    return lead >= 0 and all(d < lead or shape[d - lead] == 1 for d in dims)


@rewrite("sum")
def _factor_out_of_sum(terms, attrs, children, shape):
    """``sum(a * b, D) = a' * sum(b, D)`` and ``sum(b / a, D) = sum(b, D) / a'`` when `a`
    is constant along every summed dim (broadcast there: a RoPE table along the heads, a
    scale per row), `a'` being `a` with those (size-1) dims dropped unless kept: the sum is
    linear in `b` and every summed position meets the same `a`. Either way ``sum(x, D)`` of
    one operand is what both programs reduce, however they factored the product."""
    dims, keepdim = attrs[:2]
    inner = terms[children[0]]
    nd = len(inner.shape)
    if inner.op == "mul" and len(inner.children) == 2 and not inner.attrs:
        flat = [(a, b) for a, b in (inner.children, inner.children[::-1]) if _constant_along(terms, a, dims, nd)]
    elif inner.op == "div" and inner.attrs == EXACT_DIV and _constant_along(terms, inner.children[1], dims, nd):
        flat = [inner.children[::-1]]
    else:
        return None
    flat = [(a, b) for a, b in flat if terms.shape(b) == inner.shape]
    if len(flat) != 1:
        return None  # neither operand spans the summed dims alone (or both are constant: the sum scales)
    a, b = flat[0]
    summed = terms.make("sum", attrs, (b,), [1 if d in dims else n for d, n in enumerate(inner.shape)]
                        if keepdim else [n for d, n in enumerate(inner.shape) if d not in dims])
    if not keepdim:
        ashape = terms.shape(a)
        lead = nd - len(ashape)
        kept = [n for k, n in enumerate(ashape) if k + lead not in dims]
        a = view_term(terms, "reshape", (tuple(kept),), a, kept) if len(kept) != len(ashape) else a
    if inner.op == "div":
        return terms.make("div", EXACT_DIV, (summed, a), shape)
    return _product(terms, "mul", (), tuple(sorted((a, summed))), shape)


def _reduced(shape, dims, keepdim) -> list[int]:
    return [1 if d in dims else n for d, n in enumerate(shape)] if keepdim else \
        [n for d, n in enumerate(shape) if d not in dims]


@rewrite("sum")
def _sum_through_pieces(terms, attrs, children, shape):
    """A whole sum over dims that a concatenation (along another dim), a selection (of other
    dims) or a zero fill does not mix is taken piece by piece: ``sum(cat(p, q, c), D) =
    cat(sum(p, D), sum(q, D), c)``, ``sum(x[S], D) = sum(x, D)[S]``, ``sum(0, D) = 0`` -- each
    position of the result sums the same positions either way (a sum over the heads pushed
    under RoPE's backward, whose halves are concatenated along the head dim)."""
    dims, keepdim, over, *extra = attrs
    inner = terms[children[0]]
    if over is not None or extra:
        return None
    nd = len(inner.shape)
    if inner.op == "fill" and inner.attrs == (0, inner.shape) and not isinstance(inner.attrs[0], bool):
        return terms.make("fill", (0, tuple(shape)), (), shape)
    # a plain cat only: a padding cat's sum is padding.py's (its normal form keeps the padding marked)
    if inner.op == "cat" and len(inner.attrs) == 1 and inner.attrs[0] not in dims:
        c = inner.attrs[0]
        c_out = c if keepdim else c - sum(d < c for d in dims)
        parts = [terms.make("sum", attrs, (p,), _reduced(terms.shape(p), dims, keepdim)) for p in inner.children]
        return terms.make("cat", (c_out,), tuple(parts), shape)
    if inner.op == "gather" and len(inner.attrs) == nd and all(inner.attrs[d] is None for d in dims):
        x = inner.children[0]
        summed = terms.make("sum", attrs, (x,), _reduced(terms.shape(x), dims, keepdim))
        sel = tuple(k for d, k in enumerate(inner.attrs) if keepdim or d not in dims)
        return terms.make("gather", sel, (summed,), shape)
    return None
