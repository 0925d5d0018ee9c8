"""Exact scalar factors inside selections and concatenations, as their consumers see them.

A gradient scaled by a constant c (a mean loss per microbatch, the pipelining schedules'
``scale_grads``, a loss scale) makes every gradient downstream of it c times its share:
vector-Jacobian products are linear in the incoming gradient. Ops linear in an operand pull
c out of it as they are built (:data:`shardproof.algebra.lemmas.LINEAR_IN`, sums, views,
linear forms), so ``c·t`` with ``t`` free of a factor is the normal form of what they build.
Two structural heads hold a factor inside them, and so does a sum of parts:

- ``gather(c·x) = c·gather(x)``: a selection of a scaled tensor (a microbatch's rows, a
  slice's gradient);
- ``cat(c·a, 0, c·b) = c·cat(a, 0, b)``: pieces scaled alike, zero blocks among them
  (``slice_backward`` writes a gradient between zeros; RoPE's ``rotate_half`` backward).

These terms are *kept as built*: selections and concatenations are what the layout
machinery reads back (``unmaterialize``, a cat's pieces joined into one layout again: the
pieces of a slice_scatter, FSDP's flat shards, padded TP), and building ``c·gather(x)`` in
their place hid them from it. The factor is taken out where a consumer asks for it:
:func:`shardproof.algebra.lemmas.scaled_part` answers ``(gather(x), c)`` for them, so an op
linear in the operand (a product, a matmul, a backward op, a sum) is built as
``c·op(gather(x), ...)``, in both programs alike, however early or late they scaled; a
part of a linear form that holds a factor so is built as ``c·part`` (lemmas._flattened).

A multi-part linear form ``M·a - (M/n)·b`` (the RMSNorm backward of a scaled gradient) is
not normalised by a rule of its own coefficients: every such rule (the first part's
coefficient, the gcd, the largest one) also rewrites forms that other programs' patterns
read (``ids - 12·mask`` in vLLM's masked lookup, torchtitan's residual gradient before its
vocab mask; the first part's coefficient even differs between a form and its rank pieces).
Forms are hashed into classes instead, as they are interned: the key is the parts and the
coefficients over the largest one's magnitude; the first form of a class (the single-device
program is interpreted first) represents it, and a later one is ``c·representative``.

Each is an identity over exact arithmetic, and a factor that differs between the programs
(a gradient scaled twice) stays a different coefficient: never a relation
(tests/harness/test_scaled_parts_vs_torch.py)."""
from __future__ import annotations

from fractions import Fraction

from .lemmas import SCALED_PARTS, linear, scaled_part
from .padding import is_zero
from .terms import TermStore, on_new


def _factor(terms: TermStore, t: int):
    """(x, c) with t = c·x, x of t's shape, for an exact c other than 0 and 1, else None."""
    found = scaled_part(terms, t)
    if found is None or isinstance(found[1], bool) or found[1] in (0, 1) or terms.shape(found[0]) != terms.shape(t):
        return None
    return found[0], Fraction(found[1])


def _gather(terms: TermStore, t: int):
    term = terms[t]
    found = _factor(terms, term.children[0]) if len(term.children) == 1 else None
    return None if found is None else (terms.make("gather", term.attrs, (found[0],), term.shape), found[1])


def _cat(terms: TermStore, t: int):
    term = terms[t]
    scale, kids = None, []
    for k in term.children:
        if is_zero(terms, k):  # a zero block is any multiple of itself
            kids.append(k)
            continue
        found = _factor(terms, k)
        if found is None or scale not in (None, found[1]):
            return None
        scale = found[1]
        kids.append(found[0])
    return None if scale is None else (terms.make("cat", term.attrs, tuple(kids), term.shape), scale)


@on_new("lin")
def _linear_class(terms: TermStore, t: int) -> None:
    """Each multi-part linear form's class: its parts and coefficients over the largest
    coefficient's magnitude k (``Σ c_i t_i = k·Σ (c_i/k) t_i``). The first form built with a
    key represents it -- the single-device program is interpreted first, so its forms keep
    their shape -- and a later one is recorded as an exact multiple of it."""
    term = terms[t]
    if len(term.children) < 2:
        return
    k = max(abs(Fraction(c)) for c in term.attrs)
    key = (term.shape, term.children, tuple(Fraction(c) / k for c in term.attrs))
    found = terms.scale_reps.setdefault(key, (t, k))
    if found[0] != t:
        terms.scale_class[t] = (found[0], k / found[1])


def _content(terms: TermStore, t: int):
    """``Σ c_i t_i = c·R`` for R the first form built that it is a positive multiple of (a
    microbatch's backward scaled by M against the single device's): a form nothing else is a
    multiple of (a residual sum, ``ids - 12·mask``) is left as it stands, in both programs."""
    return terms.scale_class.get(t)


SCALED_PARTS.update(gather=_gather, cat=_cat, lin=_content)
