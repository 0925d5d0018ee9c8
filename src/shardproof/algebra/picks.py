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
