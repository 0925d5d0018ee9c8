"""Picking one element per row (``take_along``) of a linear form seen through a reshape that
merges the leading dims and keeps the picked (last) dim: megatron's vocab-parallel cross
entropy subtracts the row max from ``[s, b, v]`` logits, then views them as ``[s*b, v]`` and
picks the target's logit. Row-major, a reshape that keeps the last dim and merges the ones
before it maps row ``(i, j)`` to row ``i*b + j`` element for element, so

    take_along(reshape(Σ c·part), t) = Σ c·take_along(reshape(part), t)

with a part constant along the last dim (the broadcast max, ``[s, b, 1]``) just that part,
viewed as the picked shape (its one element per row is what every pick returns)."""
from __future__ import annotations

import math

from .layout import view_term
from .lemmas import linear
from .terms import rewrite


def _row_merge(src: tuple, dst: tuple, dim: int) -> bool:
    """Whether a reshape `src` -> `dst` keeps the last dim, picked (`dim`), and only merges or
    splits the dims before it."""
    return (len(dst) >= 1 and len(src) >= 1 and dim % len(dst) == len(dst) - 1 and src[-1] == dst[-1]
            and math.prod(src[:-1]) == math.prod(dst[:-1]))


@rewrite("take_along")
def _take_along_reshaped_linear(terms, attrs, children, shape):
    (dim,), (x, idx) = attrs, children
    view = terms[x]
    if view.op != "reshape" or terms[view.children[0]].op != "lin":
        return None
    inner = terms[view.children[0]]
    src, dst = tuple(inner.shape), tuple(view.shape)
    if not _row_merge(src, dst, dim):
        return None
    acc = {}
    for part, c in zip(inner.children, inner.attrs):
        ps = tuple(terms.shape(part))
        if ps == src[:-1] + (1,):  # constant along the picked dim, whole along the others
            picked = view_term(terms, "reshape", (tuple(shape),), part, tuple(shape))
        elif ps == src:
            picked = terms.make("take_along", attrs, (view_term(terms, "reshape", (dst,), part, dst), idx), shape)
        else:
            return None  # broadcast along a merged dim: not a plain row map
        acc[picked] = acc.get(picked, 0) + c
    return linear(terms, acc, shape)


# ---------------------------------------------------------------- rows rearranged by views
# A chain of views that keeps the last dim last and whole (reshapes of the leading dims,
# permutes fixing the last) only rearranges rows: a row-wise op (log-sum-exp over the last
# dim, a pick per row) commutes with it, and a sum over every element ignores it.

def _row_steps(terms, t: int):
    """(base, steps): `t` = the views `steps` (innermost first, each ``(op, attrs, row
    shape before, row shape after)``) applied to `base`, every one keeping the last dim."""
    steps = []
    while terms[t].op in ("reshape", "permute"):
        view, src = terms[t], terms.shape(terms[t].children[0])
        dst = tuple(view.shape)
        if not src or not dst or src[-1] != dst[-1]:
            break
        if view.op == "permute":
            perm = tuple(view.attrs[0])
            if perm[-1] != len(perm) - 1:
                break
            steps.append(("permute", (perm[:-1],), tuple(src[:-1]), dst[:-1]))
        else:
            steps.append(("reshape", (dst[:-1],), tuple(src[:-1]), dst[:-1]))
        t = view.children[0]
    return t, steps[::-1]


def _apply(terms, t: int, steps) -> int:
    for op, attrs, _, after in steps:
        t = view_term(terms, op, attrs, t, after)
    return t


def _inverse(steps):
    out = []
    for op, attrs, before, after in reversed(steps):
        if op == "permute":
            inv = tuple(sorted(range(len(attrs[0])), key=lambda i: attrs[0][i]))
            out.append(("permute", (inv,), after, before))
        else:
            out.append(("reshape", (before,), after, before))
    return out


@rewrite("logsumexp")
def _logsumexp_of_rows(terms, attrs, children, shape):
    """lse over the last dim of rearranged rows = the rows of lse, rearranged."""
    dims, keepdim = attrs[0], attrs[1]
    n = len(terms.shape(children[0]))
    if keepdim or len(attrs) != 2 or tuple(d % n for d in dims) != (n - 1,):
        return None
    base, steps = _row_steps(terms, children[0])
    if not steps:
        return None
    rows = terms.shape(base)[:-1]
    return _apply(terms, terms.make("logsumexp", ((len(rows),), False), (base,), rows), steps)


@rewrite("take_along")
def _take_along_of_rows(terms, attrs, children, shape):
    """x'[i, t_i] of rearranged rows x' = V(x): V of x[j, t'_j], t' the index seen through V⁻¹."""
    (dim,), (x, idx) = attrs, children
    n = len(terms.shape(x))
    if dim % n != n - 1 or tuple(terms.shape(idx)) != tuple(shape) or tuple(shape) != terms.shape(x)[:-1]:
        return None
    base, steps = _row_steps(terms, x)
    if not steps:
        return None
    rows = terms.shape(base)[:-1]
    picked = terms.make("take_along", (len(rows),), (base, _apply(terms, idx, _inverse(steps))), rows)
    return _apply(terms, picked, steps)


@rewrite("sum")
def _sum_of_everything_viewed(terms, attrs, children, shape):
    """A sum of every element of a view of x is the sum of every element of x."""
    dims, keepdim, over, *extra = attrs
    inner = terms[children[0]]
    n = len(inner.shape)
    if keepdim or over is not None or extra or inner.op not in ("reshape", "permute") \
            or sorted(d % n for d in dims) != list(range(n)) or tuple(shape) != ():
        return None
    x = inner.children[0]
    return terms.make("sum", (tuple(range(len(terms.shape(x)))), False, None), (x,), ())


# ---------------------------------------------------------------- row views pushed to the leaves
# So that a per-row gradient computed in one row order and viewed into another (the single
# device's [b, s] rows, megatron's [s, b]) meets the other program's term: a row-rearranging
# view of an elementwise form is that form of the viewed operands (a per-row part ``[rows,
# 1]`` viewed by its rows), of a one-hot the one-hot of the viewed index, of a constant the
# constant. Exact identities of indexing. One canonical form for every such view: a batched
# product's view of ``exp(S - c)`` goes inside too (online_softmax.unviewed sees the weights
# through it).

UNARY = ("exp", "log", "neg", "sqrt", "rsqrt", "tanh", "sigmoid")  # one-operand elementwise terms


def _row_step(terms, op: str, attrs: tuple, src: tuple, dst: tuple):
    """The step a view `src` -> `dst` keeping the last dim takes on the rows, or None."""
    if not src or not dst or src[-1] != dst[-1] or len(src) < 2 or len(dst) < 2:
        return None
    if op == "permute":
        perm = tuple(attrs[0])
        return ("permute", (perm[:-1],), dst[:-1]) if perm[-1] == len(perm) - 1 else None
    return ("reshape", (dst[:-1],), dst[:-1]) if math.prod(src[:-1]) == math.prod(dst[:-1]) else None


def _rows_viewed(terms, t: int, step) -> int:
    op, attrs, rows = step
    return view_term(terms, op, attrs, t, rows)


def _view_part(terms, op, attrs, part: int, whole: tuple, shape: tuple, step):
    ps = tuple(terms.shape(part))
    if ps == whole:
        return view_term(terms, op, attrs, part, shape)
    if all(n == 1 for n in ps):  # a scalar broadcast everywhere
        return part
    if ps == whole[:-1] + (1,):  # one value per row
        inner = terms[part]
        rows = inner.children[0] if inner.op == "reshape" and terms.shape(inner.children[0]) == whole[:-1] \
            else view_term(terms, "reshape", (whole[:-1],), part, whole[:-1])
        new_rows = _rows_viewed(terms, rows, step)
        return view_term(terms, "reshape", (tuple(shape[:-1]) + (1,),), new_rows, tuple(shape[:-1]) + (1,))
    return None


def _row_view_pushed(op: str):
    def rule(terms, attrs, children, shape):
        inner = terms[children[0]]
        whole, shape = tuple(inner.shape), tuple(shape)
        step = _row_step(terms, op, attrs, whole, shape)
        if inner.op == "fill" and len(inner.attrs) == 1:
            return terms.make("fill", inner.attrs, (), shape)
        if step is None:
            return None
        if inner.op == "onehot" and len(inner.children) == 1:
            return terms.make("onehot", inner.attrs, (_rows_viewed(terms, inner.children[0], step),), shape)
        if inner.op == "lin":
            parts = {}
            for part, c in zip(inner.children, inner.attrs):
                viewed = _view_part(terms, op, attrs, part, whole, shape, step)
                if viewed is None:
                    return None
                parts[viewed] = parts.get(viewed, 0) + c
            return linear(terms, parts, shape)
        if inner.op in UNARY and inner.attrs == ("$", ()) and len(inner.children) == 1:
            kids = [_view_part(terms, op, attrs, k, whole, shape, step) for k in inner.children]
            if any(k is None for k in kids) or not any(tuple(terms.shape(k)) == shape for k in kids):
                return None
            return terms.make(inner.op, inner.attrs, tuple(kids), shape)
        return None
    return rule


rewrite("reshape")(_row_view_pushed("reshape"))
rewrite("permute")(_row_view_pushed("permute"))


@rewrite("log_softmax_backward")
def _log_softmax_backward_of_a_bare_pick(terms, attrs, children, shape):
    """The gradient of picking one logit per row (a one-hot, its scale pulled out as a
    coefficient) through log_softmax: onehot(t) - exp(y), a one-hot row summing to one (t
    indexes the row: integer data inputs are valid indices, an assumption every report states)."""
    g, y = children
    if attrs != (0,) or terms[g].op != "onehot" or terms.shape(g) != tuple(shape):
        return None
    ey = terms.make("exp", ("$", ()), (y,), shape)
    return linear(terms, {g: 1, ey: -1}, shape)


# ---------------------------------------------------------------- a masked pick, flattened
# PyTorch's loss_parallel picks each target's logit from the rank's vocab block on flattened
# targets and zeroes the picks whose target is outside the block, the mask and the picks both
# viewed as [n, 1]: the masked pick of :mod:`.lemmas` (``where(outside, 0, lookup_in)``), seen
# through one row-major view of the targets' positions on both sides.

@rewrite("where")
def _zero_outside_range_flattened(terms, attrs, children, shape):
    from .lemmas import OUTSIDE
    from .patterns import match
    if len(children) != 2 or attrs[1] != 0:
        return None
    mask, value = children
    if terms[value].op != "reshape" or terms[mask].op != "reshape":
        return None
    inner = terms[terms[value].children[0]]
    if inner.op != "lookup_in" or terms[inner.children[1]].op != "reshape":
        return None
    _, _, lo, hi = inner.attrs
    ids = terms[inner.children[1]].children[0]
    if math.prod(terms.shape(ids)) != math.prod(shape) or \
            match(terms, terms[mask].children[0], OUTSIDE, {"ids": ids, "lo": lo, "hi": hi}) is None:
        return None
    t = terms.make("range_lookup", inner.attrs, inner.children, inner.shape)
    return view_term(terms, "reshape", (tuple(shape),), t, tuple(shape))


# ---------------------------------------------------------------- writes into a fresh constant
# loss_parallel's backward writes ``mask - 1`` at each row's (masked) target column of a fresh
# zeros block: a pick of a constant table is that constant, and ``m - c`` of a 0/1 mask is
# ``-(c - m)``, the form the scatter's one-minus-mask lemma (ops/aten.py) reads.

MASKS = ("or", "and", "not", "lt", "le", "gt", "ge", "eq", "ne")


def _pick_of_constant(terms, attrs, children, shape):
    table = terms[children[0]]
    if table.op == "fill" and len(table.attrs) == 1:
        return terms.make("fill", table.attrs, (), tuple(shape))
    return None


for _op in ("take_along", "lookup_in", "range_lookup"):
    rewrite(_op)(_pick_of_constant)


@rewrite("sub")
def _mask_minus_constant(terms, attrs, children, shape):
    if len(children) != 1 or len(attrs) != 3 or attrs[0] != "$" or attrs[2] != () \
            or isinstance(attrs[1], (str, bool)) or terms[children[0]].op not in MASKS \
            or terms.shape(children[0]) != tuple(shape):
        return None
    c_minus = terms.make("add_const", (attrs[1],), (linear(terms, {children[0]: -1}, shape),), shape)
    return linear(terms, {c_minus: -1}, shape)


@rewrite("reshape")
def _reshape_of_add_const(terms, attrs, children, shape):
    """A view of ``c + x`` is ``c + view(x)`` (elementwise with a constant: any reshape)."""
    inner = terms[children[0]]
    if inner.op != "add_const" or len(inner.children) != 1 or terms.shape(inner.children[0]) != inner.shape:
        return None
    return terms.make("add_const", inner.attrs, (view_term(terms, "reshape", attrs, inner.children[0], tuple(shape)),),
                      tuple(shape))
