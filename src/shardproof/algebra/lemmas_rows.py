"""Row-wise normal forms: log-sum-exp and softmax written by hand, picking one element per row,
inputs stated as partial sums, valid indices (a stated assumption) and constant fills.

The vocab-parallel lookup and the linear normal form these build on are in
:mod:`shardproof.algebra.lemmas`."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .ranks import RANK_SUM_LEMMAS
from .layout import view_term
from .lemmas import linear, linear_parts
from .terms import TermStore, rewrite

# ---------------------------------------------------------------- log-sum-exp

def _constant_along(terms, t: int, full_shape, dims) -> bool:
    """Whether term `t`, broadcast to `full_shape`, is constant along `dims`."""
    s = terms.shape(t)
    off = len(full_shape) - len(s)
    return all(d < off or s[d - off] == 1 for d in dims)


def _drop_dims(terms, t: int, full_shape, dims, out_shape) -> int:
    """The broadcast term `t` seen at the reduced shape (its size-1 reduced dims dropped)."""
    from .layout import view_term
    return view_term(terms, "reshape", (tuple(out_shape),), t, out_shape) if terms.shape(t) != tuple(out_shape) else t


@rewrite("log")
def _log_sum_exp(terms, attrs, children, shape):
    """log Σ_d exp(x + c) = lse_d(x) + c for c constant along d (the max-shift trick)."""
    s = terms[children[0]]
    if s.op != "sum" or s.attrs[2] is not None or terms[s.children[0]].op != "exp":
        return None
    dims = s.attrs[0]
    arg = terms[s.children[0]].children[0]
    full_shape = terms.shape(arg)
    parts = linear_parts(terms, arg)
    varying = {t: c for t, c in parts.items() if not _constant_along(terms, t, full_shape, dims)}
    if not varying:
        return None
    x = linear(terms, varying, full_shape)
    reduced = tuple(n for d, n in enumerate(full_shape) if d not in dims)
    lse = terms.make("logsumexp", (dims, False), (x,), reduced)  # keepdim is a view of it
    lse = _drop_dims(terms, lse, full_shape, dims, shape)
    acc = {lse: Fraction(1)}
    for t, c in parts.items():
        if t not in varying:
            acc[_drop_dims(terms, t, full_shape, dims, shape)] = c
    return linear(terms, acc, shape)


@rewrite("log_softmax")
def _log_softmax(terms, attrs, children, shape):
    """log_softmax(x) = x - lse(x) over the last dim (rowwise form)."""
    x = children[0]
    nd = len(shape)
    lse = terms.make("logsumexp", ((nd - 1,), False), (x,), shape[:-1])
    from .layout import view_term
    kept = view_term(terms, "reshape", (tuple(shape[:-1]) + (1,),), lse, tuple(shape[:-1]) + (1,))
    return linear(terms, {x: Fraction(1), kept: Fraction(-1)}, shape)


ELEMENTWISE_ATTRS = ("$", ())  # a one-operand elementwise term's attrs (exp, log), as compute.elementwise builds them


def _kept(terms, t: int, shape) -> int:
    return view_term(terms, "reshape", (tuple(shape),), t, shape) if terms.shape(t) != tuple(shape) else t


@rewrite("div")
def _softmax_by_hand(terms, attrs, children, shape):
    """exp(a) / Σ_d exp(a) (the sum kept along d) = exp(x - lse_d(x)), x the part of `a`
    that varies along d (a softmax written out, e.g. after subtracting the row max, is the
    exponential of log_softmax: log Σ_d exp(x + c) = lse_d(x) + c for c constant along d)."""
    if len(children) != 2 or attrs[:2] != ("$", "$") or dict(attrs[2]).get("rounding_mode") is not None:
        return None
    num, den = children
    if terms[num].op != "exp" or terms[num].attrs != ELEMENTWISE_ATTRS:
        return None
    s = terms[den]
    if s.op == "reshape":
        s = terms[s.children[0]]
    if s.op != "sum" or s.attrs[2] is not None or s.children != (num,):
        return None
    dims = tuple(d % len(shape) for d in s.attrs[0])
    arg = terms[num].children[0]
    full_shape = terms.shape(arg)
    if full_shape != tuple(shape) or terms.shape(den) != tuple(1 if d in dims else n for d, n in enumerate(shape)):
        return None
    varying = {t: c for t, c in linear_parts(terms, arg).items() if not _constant_along(terms, t, full_shape, dims)}
    if not varying:
        return None
    x = linear(terms, varying, full_shape)
    reduced = tuple(n for d, n in enumerate(full_shape) if d not in dims)
    lse = _kept(terms, terms.make("logsumexp", (dims, False), (x,), reduced), terms.shape(den))
    return terms.make("exp", ELEMENTWISE_ATTRS, (linear(terms, {x: Fraction(1), lse: Fraction(-1)}, full_shape),), shape)


@rewrite("log_softmax_backward")
def _log_softmax_backward_of_a_pick(terms, attrs, children, shape):
    """The gradient of picking one logit per row, c·onehot(t) (c constant along the row),
    through log_softmax: g - exp(y)·Σ g = c·(onehot(t) - exp(y)), as the row of a one-hot
    sums to one (t indexes the row: integer data inputs are valid indices, an assumption
    every report states). Megatron's vocab-parallel cross-entropy backward (softmax minus
    one at the target, times the incoming gradient) is this form."""
    g, y = children
    gt = terms[g]
    if attrs != (0,) or gt.op != "mul" or len(gt.children) != 2:
        return None
    kinds = {terms[c].op: c for c in gt.children}
    hot, c = kinds.get("onehot"), next((k for k in gt.children if terms[k].op != "onehot"), None)
    if hot is None or c is None or terms.shape(hot) != tuple(shape) \
            or not _constant_along(terms, c, shape, (len(shape) - 1,)):
        return None
    ey = terms.make("exp", ELEMENTWISE_ATTRS, (y,), shape)
    # as -(c·(exp(y) - onehot)): the cross-entropy gradient (softmax minus one-hot) times c
    pick_grad = terms.make("mul", gt.attrs, (c, linear(terms, {ey: Fraction(1), hot: Fraction(-1)}, shape)), shape)
    return linear(terms, {pick_grad: Fraction(-1)}, shape)


# ---------------------------------------------------------------- picking one element per row

@rewrite("take_along")
def _take_along_linear(terms, attrs, children, shape):
    """x[i, t_i] of Σ c·part: parts constant along the picked dim are just broadcast."""
    (dim,), (x, idx) = attrs, children
    inner = terms[x]
    if inner.op != "lin":
        return None
    full_shape = inner.shape
    acc = {}
    for part, c in zip(inner.children, inner.attrs):
        if _constant_along(terms, part, full_shape, (dim,)):
            acc[_drop_dims(terms, part, full_shape, (dim,), shape)] = c
        else:
            acc[terms.make("take_along", attrs, (part, idx), shape)] = c
    return linear(terms, acc, shape)


@rewrite("add_const")
def _add_zero(terms, attrs, children, shape):
    """x + 0 is x."""
    return children[0] if attrs[0] == 0 and terms.shape(children[0]) == tuple(shape) else None


# ---------------------------------------------------------------- inputs stated as partial sums

def _partial_inputs(terms: TermStore, ts: list[int]):
    """Σ_r of the ranks' pieces of an input related by Partial("sum") is the input
    (Partial("avg"): N times it). ``partial_input(op, rank, world)`` marks rank's piece."""
    from .compute import scale
    first = terms[ts[0]]
    if first.op != "partial_input" or first.attrs[0] not in ("sum", "avg"):
        return None
    if [terms[t].attrs[1] for t in ts] != list(range(len(ts))) or any(terms[t].children != first.children for t in ts):
        return None
    return first.children[0] if first.attrs[0] == "sum" else scale(terms, first.children[0], len(ts))


RANK_SUM_LEMMAS.append(_partial_inputs)


# ---------------------------------------------------------------- valid indices (stated assumption)

@rewrite("ne")
def _valid_index_is_not_negative(terms, attrs, children, shape):
    """``ids != c`` for a negative c (ignore_index) is all-true: integer data inputs are
    valid, non-negative indices (an assumption every report states)."""
    if len(children) != 1 or attrs[0] != "$" or isinstance(attrs[1], bool) or not isinstance(attrs[1], (int, Fraction)):
        return None
    x = terms[children[0]]
    if attrs[1] < 0 and x.op == "input" and len(x.attrs) > 1 and str(x.attrs[1]).startswith(("i", "u")):
        return terms.make("fill", (True,), (), shape)
    return None


def _fill_value(terms: TermStore, t: int):
    term = terms[t]
    while term.op == "reshape":
        term = terms[term.children[0]]
    return term.attrs[0] if term.op == "fill" else None


@rewrite("where")
def _where_constant(terms, attrs, children, shape):
    """where(true, a, b) is a; where(false, a, b) is b (a mask that is constant: an
    all-true valid-index test, or a whole-range mask of a group of one)."""
    mask = _fill_value(terms, children[0]) if attrs[0] == "$" else None
    if not isinstance(mask, (bool, np.bool_)):
        return None
    pick = 1 if mask else 2
    if attrs[pick] != "$":
        return terms.make("fill", (attrs[pick], tuple(shape)), (), shape)
    chosen = children[attrs[:pick].count("$")]
    return chosen if terms.shape(chosen) == tuple(shape) else None


@rewrite("sum")
def _sum_of_fill(terms, attrs, children, shape):
    """Summing a constant over n elements is n times it (e.g. counting valid targets)."""
    value = _fill_value(terms, children[0])
    if value is None or attrs[2] is not None or isinstance(value, float) and not np.isfinite(value):
        return None
    src = terms.shape(children[0])
    count = int(np.prod([src[d] for d in attrs[0]]))
    return terms.make("fill", (Fraction(value) * count,), (), shape)
