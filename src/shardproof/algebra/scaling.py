"""Exact scalar factors float to the top of selections and concatenations.

A gradient scaled by a constant c (a loss divided by the microbatch count, the pipelining
schedules' ``scale_grads``, a loss scale) gives every gradient downstream of it scaled by c:
vector-Jacobian products are linear in the incoming gradient. The ops linear in an operand
pull c out of it (:data:`shardproof.algebra.lemmas.LINEAR_IN`, sums, views); these rewrites
do the same for the two structural ops a backward pass is full of:

- ``gather(c·x) = c·gather(x)``: a selection of a scaled tensor (a slice's gradient);
- ``cat(c·a, c·b, 0, ...) = c·cat(a, b, 0, ...)``: pieces scaled alike, zero blocks among
  them (``slice_backward`` writes the gradient between zeros), padding blocks included.

So both programs reach one form ``c·t`` however early or late they scaled, and a factor that
is not the same in both (a gradient scaled twice) leaves a different coefficient: no relation.
Each is an identity over exact arithmetic (tests/harness/test_scaling_vs_torch.py)."""
from __future__ import annotations

from fractions import Fraction

from .lemmas import linear, scaled_part
from .padding import is_zero
from .terms import TermStore, rewrite


def _factor(terms: TermStore, t: int):
    """(x, c) with t = c·x for an exact c other than 1, else None."""
    found = scaled_part(terms, t)
    if found is None or found[1] in (0, 1) or isinstance(found[1], bool):
        return None
    return found


@rewrite("gather")
def _gather_of_scaled(terms: TermStore, attrs, children, shape):
    if len(children) != 1:
        return None
    found = _factor(terms, children[0])
    if found is None or terms.shape(found[0]) != terms.shape(children[0]):
        return None
    return linear(terms, {terms.make("gather", attrs, (found[0],), shape): Fraction(found[1])}, shape)


@rewrite("cat")
def _cat_of_scaled(terms: TermStore, attrs, children, shape):
    scale, kids = None, []
    for k in children:
        if is_zero(terms, k):
            kids.append(k)
            continue
        found = _factor(terms, k)
        if found is None or terms.shape(found[0]) != terms.shape(k) or scale not in (None, found[1]):
            return None
        scale = found[1]
        kids.append(found[0])
    if scale is None:
        return None
    return linear(terms, {terms.make("cat", attrs, tuple(kids), shape): Fraction(scale)}, shape)
