"""Zero-padding cats at their simplest (for :mod:`.padding`, which builds the ops over them):
the ``cat`` marked ``(dim, "pad")``, a zero fill, and values of a padded term and of its pieces
brought to the padded term alike. Below :mod:`.layout` (its ``concat`` uses them) and
:mod:`.ranks`; imports only :mod:`.layout_base`."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .layout_base import Val, vec_array
from .terms import TermStore

PAD = "pad"


def zero(terms: TermStore, shape) -> int:
    return terms.make("fill", (0,), (), tuple(shape))


def is_zero(terms: TermStore, t: int) -> bool:
    term = terms[t]
    while term.op in ("reshape", "permute", "expand") and term.children:
        term = terms[term.children[0]]
    if term.op != "fill" or not term.attrs:
        return False
    v = term.attrs[0]
    return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, float, Fraction)) and v == 0


def common_padding(terms: TermStore, vals: list) -> list:
    """Values selecting from a term with zero padding and from its pieces (one rank's block
    is all real, another's ends in padding, a third's is padding only) as selections of the
    padded term alike."""
    outer = next((v.t for v in vals if pad_cat(terms, v.t) is not None), None)
    if outer is None:
        return vals
    d, pieces = pad_cat(terms, outer)
    starts = np.cumsum([0] + list(_extents(terms, pieces, d)))
    out = []
    for v in vals:
        if v.t == outer:
            out.append(v)
            continue
        if v.t not in pieces:
            return vals
        k = pieces.index(v.t)
        vecs = list(v.vecs)
        vecs[d] = vec_array(v.vecs[d], terms.shape(v.t)[d]) + starts[k]
        out.append(Val(outer, tuple(vecs)))
    return out


def pad_cat(terms: TermStore, t: int):
    """(dim, pieces) of a padding cat, else None."""
    term = terms[t]
    if term.op == "cat" and len(term.attrs) == 2 and term.attrs[1] == PAD:
        return term.attrs[0], term.children
    return None


def _extents(terms: TermStore, pieces, dim: int) -> tuple:
    return tuple(terms.shape(p)[dim] for p in pieces)
