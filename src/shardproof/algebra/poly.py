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
        self._key_of: list[tuple] = []
        self.memo: dict[int, Poly] = {}
        self.visits = 0
        self.work = 0

    # ---------------------------------------------------------------- arithmetic
    def atom(self, key: tuple, shape) -> Poly:
        aid = self.atoms.get(key)
        if aid is None:
            aid = self.atoms[key] = len(self.atom_shape)
            self.atom_shape.append(tuple(shape))
            self._key_of.append(key)
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
        if op == "sum" and len(attrs) == 3 and isinstance(attrs[1], bool) and attrs[2] is None:
            full = self.terms.shape(kids[0])
            kept = self.reduce_sum(self.form(kids[0]), full, attrs[0])
            return kept if attrs[1] else self.reshaped(kept, _kept_shape(full, attrs[0]), shape)
        if op == "reshape" and unit_reshape(self.terms.shape(kids[0]), shape) is not None:
            return self.reshaped(self.form(kids[0]), self.terms.shape(kids[0]), shape)
        if op in ("layer_norm", "batch_norm"):
            expanded = self.layer_norm(t) if op == "layer_norm" else self.batch_norm(t)
            if expanded is not None:
                return expanded
        if op == "batch_norm_stats" and len(attrs) == 2 and _is_number(attrs[0]) and attrs[1] in (0, 1):
            full = self.terms.shape(kids[0])  # the saved mean (0) or inverse standard deviation (1), [C]
            if len(full) >= 2 and shape == (full[1],):
                dims = (0,) + tuple(range(2, len(full)))
                stats = self.statistics(kids[0], dims, attrs[0])
                return self.reshaped(stats[0] if attrs[1] == 0 else stats[2], _kept_shape(full, dims), shape)
        return self._opaque(t)

    # ---------------------------------------------------------------- size-1 reshapes
    def reshaped(self, p: Poly, old: tuple, new: tuple) -> Poly:
        """The form `p` of shape `old` viewed as `new`, a reshape that only inserts or
        removes size-1 dims (keepdim, ``view(1, C, 1, 1)``): each atom is placed in the new
        dims (an element's value does not change, only its index); the view of an atom
        that is a function of a form (sqrt, inv) is that function of the viewed form, so a
        statistic viewed away and back is the statistic again."""
        dims = unit_reshape(old, new)
        if dims is None:
            raise TooBig  # not a size-1 reshape (callers check): no normal form this way
        out: Poly = {}
        for m, c in p.items():
            mono = self.const(c)
            for aid, k in m:
                mono = self.mul(mono, self._power(self.atom_viewed(aid, old, new, dims), k))
            out = self.add(out, mono)
        return out

    def _power(self, p: Poly, k: int) -> Poly:
        out = self.const(1)
        for _ in range(k):
            out = self.mul(out, p)
        return out

    def atom_viewed(self, aid: int, old: tuple, new: tuple, dims) -> Poly:
        shape = self.atom_shape[aid]
        padded = (1,) * (len(old) - len(shape)) + shape
        placed = [1] * len(new)
        for d, e in dims:
            placed[e] = padded[d]
        placed = tuple(placed)
        if _strip(placed) == _strip(shape):
            return {((aid, 1),): Fraction(1)}
        key = self._key_of[aid]
        if key[0] == "sqrt":
            return self.atom(("sqrt", self.key(self.reshaped(dict(key[1]), shape, placed))), placed)
        if key[0] == "inv":
            inner = {key[1]: Fraction(1)} if _is_monomial(key[1]) else dict(key[1])
            return self.inv(self.reshaped(inner, shape, placed), placed)
        if key[0] == "view":  # a view of a view: one view of the first atom
            aid = key[1]
            back = unit_reshape(self.atom_shape[aid], placed)
            if back is not None:
                return self.atom_viewed(aid, self.atom_shape[aid], placed, back)
        return self.atom(("view", aid, _strip(placed)), _strip(placed))  # leading 1s do not matter

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
        return self.normalized(x, tuple(range(len(full) - k, len(full))), a[4], w, b)

    def statistics(self, x: int, dims: tuple, eps) -> tuple[Poly, Poly, Poly]:
        """(mean, x - mean, rsqrt(var + eps)) over `dims` (kept, size 1; the biased variance)."""
        full = self.terms.shape(x)
        n = 1
        for d in dims:
            n *= full[d]
        h = self.form(x)
        mean = self.add(self.reduce_sum(h, full, dims), coefs=(Fraction(1, n),))
        centered = self.add(h, mean, coefs=(1, -1))
        var = self.add(self.reduce_sum(self.mul(centered, centered), full, dims), coefs=(Fraction(1, n),))
        kept = _kept_shape(full, dims)
        root = self.atom(("sqrt", self.key(self.add(var, self.const(eps)))), kept)
        return mean, centered, self.inv(root, kept)

    def normalized(self, x: int, dims: tuple, eps, w: Optional[int], b: Optional[int]) -> Poly:
        """``(x - mean)·rsqrt(var + eps)·w + b``, the statistics over `dims` (the biased variance)."""
        _, centered, inv_std = self.statistics(x, dims, eps)
        y = self.mul(centered, inv_std)
        if w is not None:
            y = self.mul(y, self.form(w))
        if b is not None:
            y = self.add(y, self.form(b))
        return y

    def batch_norm(self, t: int) -> Optional[Poly]:
        """Training-mode batch norm (the engine's ``batch_norm`` term: x over the whole batch,
        per-channel weight and bias viewed as ``[C, 1, ...]``) by its definition: the
        statistics over every dim but the channel dim 1, the biased variance."""
        term = self.terms[t]
        a = term.attrs
        if len(a) != 2 or not _is_number(a[0]) or len(a[1]) != 2 or len(term.children) != 1 + sum(a[1]):
            return None
        x, *params = term.children
        w = params.pop(0) if a[1][0] else None
        b = params.pop(0) if a[1][1] else None
        full = self.terms.shape(x)
        if len(full) < 2 or tuple(full) != tuple(term.shape):
            return None
        return self.normalized(x, (0,) + tuple(range(2, len(full))), a[0], w, b)


def _strip(shape: tuple) -> tuple:
    """A shape without its leading 1s (forms broadcast right-aligned: those do not matter)."""
    k = 0
    while k < len(shape) and shape[k] == 1:
        k += 1
    return tuple(shape[k:])


def _kept_shape(full: tuple, dims) -> tuple:
    return tuple(1 if d in dims else s for d, s in enumerate(full))


def _is_monomial(key) -> bool:
    """An ``inv`` atom's key holds a monomial ((atom, power), ...) or a form's key ((monomial, coef), ...)."""
    return bool(key) and all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], int) for x in key)


def unit_reshape(old: tuple, new: tuple):
    """For a reshape that only inserts or removes size-1 dims: the pairs (old dim, new dim)
    of the dims of size > 1, in order; None for any other reshape."""
    o = [d for d, s in enumerate(old) if s != 1]
    n = [e for e, s in enumerate(new) if s != 1]
    if [old[d] for d in o] != [new[e] for e in n]:
        return None
    return tuple(zip(o, n))


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
