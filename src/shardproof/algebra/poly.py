"""Polynomial normal form: a semantic equality check for two terms that are not the same term.

A term is read as a sum of monomials over *atoms* with exact rational coefficients
(``fractions.Fraction``). Products distribute over sums; a reduction ``sum`` over dims keeps
its factors that are constant along those dims outside (``Σ_j a_i·h_ij = a_i·Σ_j h_ij``) and
counts a constant part n times; everything else (an input, ``sqrt``, an opaque op) is an
atom, keyed by its op, attributes and its operands' normal forms and shapes, so two atoms
are one only when they apply one function to equal values. Division is multiplication by
an atom ``inv(d)`` and never cancels (``h·h/h`` is not ``h``: at ``h = 0`` one side is
undefined), and ``rsqrt(v)`` is ``inv(sqrt(v))``.

Layer norm is expanded by its definition: ``mean = Σh/n``, ``var = Σ(h - mean)²/n``,
``y = (h - mean)·rsqrt(var + eps)·w + b``; the centered variance and ``E[h²] - E[h]²`` have
one normal form (the identity holds in exact real arithmetic, the verdict's definition).

Every value broadcasts right-aligned (numpy), so a monomial's value at an index is the
product of its atoms' values at that index. The check is sound by construction (each step
is an identity of real arithmetic wherever both sides are defined) and incomplete: it gives
up (no proof) past a size budget. tests/harness/test_poly_vs_exact.py draws random
identities and non-identities and evaluates them exactly."""
from __future__ import annotations

from fractions import Fraction
from typing import Optional

from .lemmas import EXACT_DIV
from .terms import TermStore

Monomial = tuple  # sorted ((atom id, power), ...)
Poly = dict  # Monomial -> Fraction

MAX_MONOMIALS = 400
MAX_VISITS = 4000
MAX_WORK = 200_000  # monomial products over one comparison: a failing comparison stays cheap
NO_ATTRS = ("$", ())  # an elementwise unary op without arguments


class TooBig(Exception):
    """The normal form would pass the budget: no proof this way."""


def _is_number(v) -> bool:
    return isinstance(v, (int, Fraction)) and not isinstance(v, bool)


class Normalizer:
    """Normal forms of terms of one store; atoms are interned, so two terms compare by
    their forms' equality."""

    def __init__(self, terms: TermStore) -> None:
        self.terms = terms
        self.atoms: dict[tuple, int] = {}
        self.atom_shape: list[tuple] = []
        self.memo: dict[int, Poly] = {}
        self.visits = 0
        self.work = 0

    # ---------------------------------------------------------------- arithmetic
    def atom(self, key: tuple, shape) -> Poly:
        aid = self.atoms.get(key)
        if aid is None:
            aid = self.atoms[key] = len(self.atom_shape)
            self.atom_shape.append(tuple(shape))
        return {((aid, 1),): Fraction(1)}

    @staticmethod
    def const(c) -> Poly:
        return {(): Fraction(c)} if c != 0 else {}

    @staticmethod
    def add(*polys: Poly, coefs=None) -> Poly:
        out: Poly = {}
        for i, p in enumerate(polys):
            w = Fraction(1) if coefs is None else Fraction(coefs[i])
            for m, c in p.items():
                out[m] = out.get(m, Fraction(0)) + w * c
        out = {m: c for m, c in out.items() if c != 0}
        if len(out) > MAX_MONOMIALS:
            raise TooBig
        return out

    def mul(self, a: Poly, b: Poly) -> Poly:
        self.work += len(a) * len(b)
        if self.work > MAX_WORK:
            raise TooBig
        out: Poly = {}
        for ma, ca in a.items():
            for mb, cb in b.items():
                powers = dict(ma)
                for aid, k in mb:
                    powers[aid] = powers.get(aid, 0) + k
                m = tuple(sorted(powers.items()))
                out[m] = out.get(m, Fraction(0)) + ca * cb
        out = {m: c for m, c in out.items() if c != 0}
        if len(out) > MAX_MONOMIALS:
            raise TooBig
        return out

    def key(self, p: Poly) -> tuple:
        return tuple(sorted(p.items()))

    def inv(self, p: Poly, shape) -> Poly:
        """1/p: a one-monomial form c·m is (1/c)·inv(m); else the atom inv(p)."""
        if len(p) == 1:
            (m, c), = p.items()
            if not m:
                return self.const(1 / c)
            return self.mul(self.const(1 / c), self.atom(("inv", m), shape))
        return self.atom(("inv", self.key(p)), shape)

    def _constant_along(self, aid: int, full: tuple, dims) -> bool:
        sa = self.atom_shape[aid]
        off = len(full) - len(sa)
        return all(d < off or sa[d - off] == 1 for d in dims)

    def reduce_sum(self, p: Poly, full: tuple, dims) -> Poly:
        """Σ over `dims` (kept, size 1) of a form of shape `full`: constant factors come out,
        a constant monomial counts once per element summed."""
        n = 1
        for d in dims:
            n *= full[d]
        out_shape = tuple(1 if d in dims else s for d, s in enumerate(full))
        parts = []
        for m, c in p.items():
            outside = tuple((a, k) for a, k in m if self._constant_along(a, full, dims))
            inside = tuple((a, k) for a, k in m if not self._constant_along(a, full, dims))
            if not inside:
                parts.append({m: c * n})
                continue
            summed = self.atom(("sum", tuple(dims), full, inside), out_shape)
            parts.append(self.mul({outside: c}, summed))
        return self.add(*parts)

    # ---------------------------------------------------------------- terms
    def form(self, t: int) -> Poly:
        if t in self.memo:
            return self.memo[t]
        self.visits += 1
        if self.visits > MAX_VISITS:
            raise TooBig
        p = self._form(t)
        self.memo[t] = p
        return p

    def _opaque(self, t: int) -> Poly:
        term = self.terms[t]
        if not term.children:
            return self.atom(("leaf", t), term.shape)
        kids = tuple((self.key(self.form(c)), self.terms.shape(c)) for c in term.children)
        return self.atom(("op", term.op, term.attrs, kids), term.shape)

    def _form(self, t: int) -> Poly:
        term = self.terms[t]
        op, attrs, kids, shape = term.op, term.attrs, term.children, term.shape
        if op == "lin":
            return self.add(*(self.form(k) for k in kids), coefs=attrs)
        if op == "scale" and _is_number(attrs[0]):
            return self.add(self.form(kids[0]), coefs=(attrs[0],))
        if op == "add" and len(kids) == 2 and attrs == ():
            return self.add(self.form(kids[0]), self.form(kids[1]))
        if op == "add_const" and _is_number(attrs[0]):
            return self.add(self.form(kids[0]), self.const(attrs[0]))
        if op == "fill" and attrs and _is_number(attrs[0]):
            return self.const(attrs[0])
        if op == "mul" and len(kids) == 2 and attrs == ():
            return self.mul(self.form(kids[0]), self.form(kids[1]))
        if op == "square" and attrs == NO_ATTRS:
            return self.mul(self.form(kids[0]), self.form(kids[0]))
        if op == "pow" and len(kids) == 1 and len(attrs) >= 2 and attrs[0] == "$" \
                and isinstance(attrs[1], int) and not isinstance(attrs[1], bool) and 1 <= attrs[1] <= 4:
            out = self.const(1)
            for _ in range(attrs[1]):
                out = self.mul(out, self.form(kids[0]))
            return out
        if op == "div" and attrs == EXACT_DIV and len(kids) == 2:
            return self.mul(self.form(kids[0]), self.inv(self.form(kids[1]), self.terms.shape(kids[1])))
        if op == "reciprocal" and attrs == NO_ATTRS:
            return self.inv(self.form(kids[0]), shape)
        if op in ("sqrt", "rsqrt") and attrs == NO_ATTRS:
            root = self.atom(("sqrt", self.key(self.form(kids[0]))), shape)
            return root if op == "sqrt" else self.inv(root, shape)
        if op == "sum" and len(attrs) == 3 and attrs[1] is True and attrs[2] is None:
            return self.reduce_sum(self.form(kids[0]), self.terms.shape(kids[0]), attrs[0])
        if op == "layer_norm":
            expanded = self.layer_norm(t)
            if expanded is not None:
                return expanded
        return self._opaque(t)

    def layer_norm(self, t: int) -> Optional[Poly]:
        """Output 0 of layer_norm(x, normalized_shape, w, b, eps) by its definition."""
        term = self.terms[t]
        a = term.attrs
        if len(a) != 7 or a[0] != "$" or a[-1] != 0 or a[-2] != () or not _is_number(a[4]):
            return None
        kids = list(term.children)
        x = kids.pop(0)
        w = kids.pop(0) if a[2] == "$" else None
        b = kids.pop(0) if a[3] == "$" else None
        if kids or (a[2] not in ("$", None)) or (a[3] not in ("$", None)):
            return None
        full = self.terms.shape(x)
        k = len(a[1])
        dims = tuple(range(len(full) - k, len(full)))
        n = 1
        for d in dims:
            n *= full[d]
        h = self.form(x)
        mean = self.add(self.reduce_sum(h, full, dims), coefs=(Fraction(1, n),))
        centered = self.add(h, mean, coefs=(1, -1))
        var = self.add(self.reduce_sum(self.mul(centered, centered), full, dims), coefs=(Fraction(1, n),))
        kept = tuple(1 if d in dims else s for d, s in enumerate(full))
        root = self.atom(("sqrt", self.key(self.add(var, self.const(a[4])))), kept)
        y = self.mul(centered, self.inv(root, kept))
        if w is not None:
            y = self.mul(y, self.form(w))
        if b is not None:
            y = self.add(y, self.form(b))
        return y


def same_polynomial(terms: TermStore, a: int, b: int) -> bool:
    """Whether terms a and b (of one shape) have one polynomial normal form: then they are
    equal wherever both are defined. False when they differ or the forms pass the budget."""
    if terms.shape(a) != terms.shape(b):
        return False
    norm = Normalizer(terms)
    try:
        return norm.form(a) == norm.form(b)
    except (TooBig, RecursionError):
        return False
