"""Term rewrites (normal forms) and cross-rank lemmas that are patterns, not op rules.

Vocab-parallel lookup (Megatron ``VocabParallelEmbedding``, vLLM's masked embedding):
rank r owns rows [lo, hi) of the table, masks ids outside its range, looks up locally
and zeroes the masked rows; summed over ranks whose ranges tile the table this is the
plain lookup. Each step is a general identity, stated as a pattern:

The same holds for picking one element per row from column blocks (Megatron's
vocab-parallel cross-entropy picks the target logit that way).

1. ``embedding(W[lo:hi], where(ids<lo | ids>=hi, c, ids-lo))`` equals
   ``embedding(W, ids)`` wherever ``lo <= ids < hi``        -> ``lookup_in(W, ids, lo, hi)``
2. ``where(ids<lo | ids>=hi, 0, lookup_in(...))`` is zero outside the range
                                                           -> ``range_lookup(W, ids, lo, hi)``
3. ``Σ_r range_lookup(W, ids, lo_r, hi_r)`` over ranges tiling W's rows is ``embedding(W, ids)``
   (ids index W, so each lies in exactly one range).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .patterns import Const, P, V, first_match, match, through_views
from .compute import _reshape_lifted
from .ranks import COMPLETES, RANK_SUM_LEMMAS, complete_partials, sum_terms
from .layout import view_term
from .terms import TermStore, rewrite

OUTSIDE = P("or", P("lt", V("ids"), _1=Const("lo")), P("ge", V("ids"), _1=Const("hi")))
# where(m, c, ids - lo): the constant c is the masked (true) branch -- not where(m, ids - lo, c)
MASKED_IDS = P("where", OUTSIDE, P("sub", V("ids"), _1=Const("lo")), _1=lambda a: a != "$")
# the owned block of the table: rows (embedding) or columns (one pick per row)
BLOCK = {"embedding": P("gather", V("W"), _0=Const("rows"), _1=None),
         "take_along": P("gather", V("W"), _0=None, _1=Const("rows"))}


def _lookup_in_range(kind: str):
    def rule(terms: TermStore, attrs, children, shape):
        table, ids = children
        # the owned block, or the whole table (a group of one masks against its full range)
        env = match(terms, table, BLOCK[kind]) or {"W": table, "rows": None}
        env = first_match(terms, ids, [MASKED_IDS, P("reshape", MASKED_IDS)], env)
        if not env or not isinstance(env["lo"], int) or not isinstance(env["hi"], int):
            return None
        size = terms.shape(env["W"])[0 if kind == "embedding" else 1]
        rows = np.arange(size) if env["rows"] is None else np.frombuffer(env["rows"], dtype=np.int64)
        if not np.array_equal(rows, np.arange(env["lo"], env["hi"])):
            return None
        if terms[ids].op == "reshape":  # ids masked, then flattened: look up the flattened ids
            env["ids"] = view_term(terms, "reshape", terms[ids].attrs, env["ids"], terms.shape(ids))
        return terms.make("lookup_in", (kind, attrs, env["lo"], env["hi"]), (env["W"], env["ids"]), shape)
    rewrite(kind)(rule)


_lookup_in_range("embedding")
_lookup_in_range("take_along")


@rewrite("where")
def _zero_outside_range(terms: TermStore, attrs, children, shape):
    if len(children) != 2 or attrs[1] != 0:
        return None
    mask, value = children
    inner = terms[value]
    viewed = inner.op == "reshape"  # looked up on flattened ids, viewed back to the ids' shape
    if viewed:
        inner = terms[inner.children[0]]
    if inner.op != "lookup_in":
        return None
    _, _, lo, hi = inner.attrs
    ids = inner.children[1]
    if viewed:
        if terms[ids].op != "reshape" or terms.shape(terms[ids].children[0]) != tuple(shape):
            return None
        ids = terms[ids].children[0]
    env = first_match(terms, mask, through_views(OUTSIDE), {"ids": ids, "lo": lo, "hi": hi})
    if env is None and terms[ids].op == "reshape" and terms[mask].op == "reshape" \
            and terms.shape(terms[mask].children[0]) == terms.shape(terms[ids].children[0]):
        # ids flattened before the lookup, the mask computed on them (so built before the same view)
        env = match(terms, terms[mask].children[0], OUTSIDE, {"ids": terms[ids].children[0], "lo": lo, "hi": hi})
    if env is None:
        return None
    t = terms.make("range_lookup", inner.attrs, inner.children, inner.shape)
    return view_term(terms, "reshape", (tuple(shape),), t, shape) if viewed else t


@rewrite("range_lookup")
def _whole_range(terms: TermStore, attrs, children, shape):
    """A range covering the whole table (a group of one) is the plain lookup."""
    kind, op_attrs, lo, hi = attrs
    if lo == 0 and hi == terms.shape(children[0])[0 if kind == "embedding" else 1]:
        return terms.make(kind, op_attrs, children, shape)
    return None


def _tiled_lookups(terms: TermStore, ts: list[int]):
    pieces = [terms[t] for t in ts]
    if any(p.op != "range_lookup" or p.children != pieces[0].children or p.attrs[:2] != pieces[0].attrs[:2]
           for p in pieces):
        return None
    kind, op_attrs = pieces[0].attrs[:2]
    table = pieces[0].children[0]
    size = terms.shape(table)[0 if kind == "embedding" else 1]
    ranges = sorted(p.attrs[2:] for p in pieces)
    if ranges[0][0] != 0 or ranges[-1][1] != size or any(a[1] != b[0] for a, b in zip(ranges, ranges[1:])):
        return None
    return terms.make(kind, op_attrs, pieces[0].children, pieces[0].shape)


RANK_SUM_LEMMAS.append(_tiled_lookups)


# ---------------------------------------------------------------- linear normal form
#
# Sums, differences and exact scalings are one term ``lin(c_1 t_1 + ... + c_k t_k)``
# with children sorted and like terms merged, so that ``(L - M) - (P - M)`` and
# ``-(P - L)`` are the same term ``L - P``.

def linear_parts(terms: TermStore, t: int) -> dict[int, Fraction]:
    term = terms[t]
    if term.op == "lin":
        return dict(zip(term.children, term.attrs))
    return {t: Fraction(1)}


def _flattened(terms: TermStore, parts: dict[int, Fraction]) -> dict[int, Fraction]:
    """Parts that are linear forms themselves merge into this one; zero parts drop."""
    flat: dict[int, Fraction] = {}
    for t, c in parts.items():
        for k, ck in linear_parts(terms, t).items():
            found = SCALED_PARTS[terms[k].op](terms, k) if terms[k].op in SCALED_PARTS and terms[k].op != "lin" else None
            if found is not None and terms.shape(found[0]) == terms.shape(k):  # a factor inside a part: c·part
                k, ck = found[0], ck * found[1]
            flat[k] = flat.get(k, Fraction(0)) + c * ck
    return {t: c for t, c in flat.items() if c != 0}


def linear(terms: TermStore, parts: dict[int, Fraction], shape) -> int | None:
    """Build the normal form of Σ c·t (None when everything cancels)."""
    parts = _flattened(terms, _whole_reductions(terms, _common_divisors(terms, _flattened(terms, parts), shape)))
    if not parts:
        return None
    if len(parts) == 1:
        (t, c), = parts.items()
        if c == 1 and terms.shape(t) == tuple(shape):
            return t
    kids = tuple(sorted(parts))
    return terms.make("lin", tuple(parts[k] for k in kids), kids, shape)


def _whole_reductions(terms: TermStore, parts: dict[int, Fraction]) -> dict[int, Fraction]:
    """c·sum(x[P_1]) + ... + c·sum(x[P_k]) over a partition P of a dim is c·sum(x): the
    same identity a collective completes, met inside one program (micro-batches of a
    batch accumulated one after another)."""
    groups: dict[tuple, list[tuple[int, int]]] = {}
    for t, c in parts.items():
        views, base = _peel_views(terms, t)  # the same view of each piece is a view of their sum
        term = terms[base]
        if term.op in COMPLETES and COMPLETES[term.op] == "sum":
            groups.setdefault((c, views, term.op, term.children), []).append((t, base))
    for (c, views, _, _), found in groups.items():
        if len(found) > 1:
            whole = complete_partials(terms, [base for _, base in found], "sum")
            if whole is not None:
                for t, _ in found:
                    del parts[t]
                for op, attrs, shape in reversed(views):
                    whole = view_term(terms, op, attrs, whole, shape)
                parts[whole] = parts.get(whole, Fraction(0)) + c
    return parts


def _peel_views(terms: TermStore, t: int) -> tuple[tuple, int]:
    """The chain of reshapes/permutes over a term (outermost first) and the term under it."""
    views = []
    while terms[t].op in ("reshape", "permute"):
        views.append((terms[t].op, terms[t].attrs, terms[t].shape))
        t = terms[t].children[0]
    return tuple(views), t


EXACT_DIV = ("$", "$", (("rounding_mode", None),))


def _common_divisors(terms: TermStore, parts: dict[int, Fraction], shape) -> dict[int, Fraction]:
    """Σ c_i·(x_i / d) is (Σ c_i·x_i) / d: division by one tensor is linear in the
    numerator (a loss normalised by the global token count, summed over micro-batches)."""
    groups: dict[int, list[int]] = {}
    for t in parts:
        term = terms[t]
        if term.op == "div" and term.attrs == EXACT_DIV and term.shape == tuple(shape) \
                and terms.shape(term.children[0]) == tuple(shape):
            groups.setdefault(term.children[1], []).append(t)
    for divisor, ts in groups.items():
        if len(ts) < 2:
            continue
        numerator = linear(terms, {terms[t].children[0]: parts.pop(t) for t in ts}, shape)
        if numerator is not None:
            whole = terms.make("div", EXACT_DIV, (numerator, divisor), shape)
            parts[whole] = parts.get(whole, Fraction(0)) + 1
    return parts


# term op -> (store, t) -> (x, c) with t = c·x, for heads holding an exact factor inside them
# that no op rule pulls out as it is built (algebra/scaling.py registers them)
SCALED_PARTS: dict = {}


def scaled_part(terms: TermStore, t: int):
    """(x, c) when term t is c·x: a one-part linear form, or views of one (scales sit
    under views in the normal form), else None."""
    term = terms[t]
    if term.op in ("reshape", "permute"):
        inner = scaled_part(terms, term.children[0])
        return None if inner is None else (view_term(terms, term.op, term.attrs, inner[0], term.shape), inner[1])
    if term.op == "lin" and len(term.children) == 1 and terms.shape(term.children[0]) == term.shape:
        return term.children[0], term.attrs[0]
    if term.op in SCALED_PARTS:  # a factor inside a selection, concatenation or sum (algebra/scaling.py)
        return SCALED_PARTS[term.op](terms, t)
    value = term.attrs[0] if term.op == "fill" and term.attrs else None
    if isinstance(value, (int, Fraction)) and not isinstance(value, bool) and value not in (0, 1):
        return terms.make("fill", (1,), (), term.shape), Fraction(value)  # the constant c is c times one
    return None


# Ops homogeneous of degree one in some operands (term op -> child positions): a product
# in each factor, a quotient in its numerator, every backward op in the incoming gradient.
LINEAR_IN: dict[str, tuple[int, ...]] = {
    "mul": (0, 1), "div": (0,), "dot": (0, 1), "gelu_backward": (0,), "threshold_backward": (0,),
    "sigmoid_backward": (0,), "tanh_backward": (0,), "silu_backward": (0,), "softmax_backward": (0,),
    "log_softmax_backward": (0,), "layer_norm_backward": (0,), "sdpa_backward": (0,), "sum": (0,),
}
ELEMENTWISE = {"mul", "div", "gelu_backward", "threshold_backward", "sigmoid_backward", "tanh_backward",
               "silu_backward"}


def _product(terms: TermStore, op: str, attrs, kids: tuple, shape) -> int:
    """op(kids), elementwise ops applied before a reshape as compute.elementwise does."""
    lifted = _reshape_lifted(terms, kids, shape) if op in ELEMENTWISE else None
    if lifted is None:
        return terms.make(op, attrs, kids, shape)
    base, inner_kids = lifted
    return view_term(terms, "reshape", (tuple(shape),), terms.make(op, attrs, inner_kids, terms.shape(base)), shape)


def _scale_out(op: str):
    """c·x in a slot the op is linear in: (c)·op(x, ...), so exact scales (a loss scale, a
    1/N normalisation, an average over a group) float to the top and both programs meet in
    one form however they scaled."""
    def rule(terms, attrs, children, shape):
        if op == "div" and attrs != EXACT_DIV:
            return None
        kids, c = list(children), Fraction(1)
        for i in LINEAR_IN[op]:
            found = scaled_part(terms, children[i]) if i < len(children) else None
            if found is not None:
                kids[i], c = found[0], c * found[1]
        if c == 1 and kids == list(children):
            return None
        return linear(terms, {_product(terms, op, attrs, tuple(kids), shape): c}, shape)
    rewrite(op)(rule)


for _op in LINEAR_IN:
    _scale_out(_op)


@rewrite("mul")
def _times_one(terms, attrs, children, shape):
    """x * 1 is x (the one left where a constant factor was pulled out as a scale)."""
    if len(children) != 2:
        return None
    for one, x in (children, children[::-1]):
        if terms[one].op == "fill" and terms[one].attrs[:1] == (1,) and terms.shape(x) == tuple(shape) \
                and not isinstance(terms[one].attrs[0], bool):
            return x
    return None


@rewrite("div")
def _div_by_scaled(terms, attrs, children, shape):
    """x / (c·d) = (1/c)·(x / d): a count divided by a group size, then divided into a sum."""
    x, d = children if len(children) == 2 else (None, None)
    scaled = scaled_part(terms, d) if attrs == EXACT_DIV and d is not None else None
    if scaled is None or scaled[1] == 0:
        return None
    return linear(terms, {terms.make("div", attrs, (x, scaled[0]), shape): 1 / Fraction(scaled[1])}, shape)


def _merge(terms, weighted, shape):
    acc: dict[int, Fraction] = {}
    for t, w in weighted:
        for k, c in linear_parts(terms, t).items():
            acc[k] = acc.get(k, Fraction(0)) + w * c
    return linear(terms, acc, shape)


@rewrite("add")
def _add_linear(terms, attrs, children, shape):
    return _merge(terms, [(c, Fraction(1)) for c in children], shape) if len(children) == 2 else None


@rewrite("sub")
def _sub_linear(terms, attrs, children, shape):
    if len(children) != 2 or attrs[:2] != ("$", "$"):
        return None
    alpha = attrs[2] if len(attrs) > 3 else dict(attrs[-1]).get("alpha", 1) if len(attrs) > 2 else 1  # a - alpha*b
    if isinstance(alpha, (bool, str)) or not isinstance(alpha, (int, Fraction)):
        return None
    return _merge(terms, [(children[0], Fraction(1)), (children[1], -Fraction(alpha))], shape)


@rewrite("scale")
def _scale_linear(terms, attrs, children, shape):
    return _merge(terms, [(children[0], Fraction(attrs[0]))], shape)


def _sum_linear(terms: TermStore, ts: list[int]):
    """Σ_r of linear forms: parts common to all ranks scale by N; the rest pair up by
    coefficient and, among parts of one coefficient, by what they compute from which operands
    (op and children, not the per-rank piece their attrs select), and sum recursively.
    Regrouping Σ_r Σ_i c_i t_ri as Σ_i c_i Σ_r t_ri holds for any pairing; this one lets
    ``a_r + b_r`` (two partial sums added before one all_reduce) complete a and b apart."""
    forms = [linear_parts(terms, t) for t in ts]
    if all(len(f) == 1 and next(iter(f.values())) == 1 for f in forms):
        return None
    shape = terms[ts[0]].shape
    common = {t: c for t, c in forms[0].items() if all(f.get(t) == c for f in forms)}
    acc = {t: c * len(ts) for t, c in common.items()}

    def paired(form):
        rest = [(c, t) for t, c in form.items() if t not in common]
        return sorted(rest, key=lambda p: (p[0], terms[p[1]].op, terms[p[1]].children, terms.shape(p[1]), p[1]))
    rest = [paired(f) for f in forms]
    coefs = [c for c, _ in rest[0]]
    if any([c for c, _ in r] != coefs for r in rest):
        return _sum_of_all_parts(terms, forms, shape)
    for i, c in enumerate(coefs):
        summed = sum_terms(terms, [r[i][1] for r in rest])
        if terms[summed].op == "sum_ranks":
            return _sum_of_all_parts(terms, forms, shape)
        acc[summed] = acc.get(summed, Fraction(0)) + c
    return linear(terms, acc, shape)


def _sum_of_all_parts(terms: TermStore, forms: list[dict[int, Fraction]], shape):
    """Σ_r Σ_i c_ri·t_ri is one linear form of all the ranks' parts (a part only some
    ranks hold counts once per holder); pieces of one reduction over a partition, with
    equal coefficients, complete in it (a squared-gradient norm: sharded parameters'
    partial sums on every rank, replicated ones added on one rank)."""
    acc: dict[int, Fraction] = {}
    for form in forms:
        for t, c in form.items():
            acc[t] = acc.get(t, Fraction(0)) + c
    return linear(terms, acc, shape)


RANK_SUM_LEMMAS.append(_sum_linear)


@rewrite("sum")
def _sum_of_linear(terms, attrs, children, shape):
    """sum(Σ c·t) = Σ c·sum(t) when every part spans the whole operand."""
    inner = terms[children[0]]
    if inner.op != "lin" or any(terms.shape(k) != inner.shape for k in inner.children):
        return None
    return linear(terms, {terms.make("sum", attrs, (k,), shape): c for k, c in zip(inner.children, inner.attrs)},
                  shape)


def merged_groups(src, dst) -> list[list[int]] | None:
    """For a reshape that only merges consecutive dims, the source dims of each target
    dim (size-1 dims go with their neighbours); None if it splits a dim."""
    groups, i = [], 0
    for size in dst:
        group, prod = [], 1
        while i < len(src) and (prod < size or src[i] == 1 and prod == size == 1 and not group):
            group.append(i)
            prod *= src[i]
            i += 1
        if prod != size:
            return None
        groups.append(group)
    while i < len(src) and src[i] == 1 and groups:
        groups[-1].append(i)
        i += 1
    return groups if i == len(src) else None


@rewrite("sum")
def _sum_of_merged_view(terms, attrs, children, shape):
    """Summing a reshape that merged the reduced dims is summing the dims it merged:
    ``sum(x.view(b*s, h), 0) = sum(x, (0, 1))`` (a batch and its micro-batches agree)."""
    dims, keepdim, over, *extra = attrs
    inner = terms[children[0]]
    if over is not None or inner.op != "reshape":
        return None
    src = terms.shape(inner.children[0])
    groups = merged_groups(src, inner.shape)
    if groups is None:
        return _sum_of_split_view(terms, attrs, inner, shape)
    if any(sum(src[d] > 1 for d in groups[j]) > 1 for j in range(len(groups)) if j not in dims):
        return None
    reduced = tuple(sorted(d for j in dims for d in groups[j]))
    if not reduced:
        return None
    kept = [src[d] for d in range(len(src)) if keepdim or d not in reduced]
    kept = [1 if d in reduced else s for d, s in zip(range(len(src)), src)] if keepdim else kept
    t = terms.make("sum", (reduced, keepdim, None, *extra), (inner.children[0],), kept)
    return view_term(terms, "reshape", (tuple(shape),), t, shape)


def _sum_of_split_view(terms, attrs, inner, shape):
    """Summing a reshape that split dims, over whole split groups, is summing the dims it
    split: ``sum(x.view(b, s, h), (0, 1)) = sum(x, 0)`` for x of shape (b*s, h) (a microbatch
    of a flattened batch summed as the whole batch is), viewed as the result."""
    dims, keepdim, over, *extra = attrs
    dims = {d % len(inner.shape) for d in dims}
    src = terms.shape(inner.children[0])
    groups = merged_groups(inner.shape, src)  # the view's dims making up each source dim
    if groups is None:
        return None
    reduced = []
    for d, group in enumerate(groups):
        real = [j for j in group if inner.shape[j] > 1]
        if real and all(j in dims for j in real):
            reduced.append(d)
        elif any(j in dims for j in real):
            return None  # a split dim summed only in part
    if not reduced:
        return None
    kept = [1 if d in reduced else n for d, n in enumerate(src)] if keepdim else \
        [n for d, n in enumerate(src) if d not in reduced]
    t = terms.make("sum", (tuple(reduced), keepdim, None, *extra), (inner.children[0],), kept)
    return view_term(terms, "reshape", (tuple(shape),), t, shape)
