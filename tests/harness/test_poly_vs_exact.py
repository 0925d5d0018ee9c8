"""Soundness of the polynomial normal form (algebra/poly.py), judged by exact arithmetic:
whenever two terms get one normal form, they evaluate to the same rationals (numpy object
arrays of ``Fraction``) on random inputs; known identities are found and known
non-identities (n-1 divisors, a missing cross term, a cancelled division) are not; layer
norm's and batch norm's expansions hold torch's float64 values; size-1 reshapes (keepdim,
``view(1, C, 1, 1)``) keep exact values."""
from fractions import Fraction

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import shardproof.ops  # noqa: F401  (registers the term rewrites the engine builds with)
from shardproof.algebra.lemmas import EXACT_DIV
from shardproof.algebra.poly import Normalizer, same_polynomial
from shardproof.algebra.terms import TermStore

from .core import examples

SETTINGS = settings(max_examples=examples(60), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
SHAPES = {"x": (2, 3), "z": (2, 3), "y": (2, 1), "w": (3,)}
SUM1 = ((1,), True, None)


def _bshape(*shapes):
    return tuple(np.broadcast_shapes(*shapes))


class Builder:
    """Terms and their exact values side by side."""

    def __init__(self):
        self.terms = TermStore()
        self.leaves = {k: self.terms.make("input", (k, "f32"), (), s) for k, s in SHAPES.items()}

    def shape(self, t):
        return self.terms.shape(t)

    def leaf(self, k):
        return self.leaves[k], lambda env: env[k]

    def add(self, a, b, cb=1):
        (ta, fa), (tb, fb) = a, b
        if cb != 1:
            tb = self.terms.make("scale", (Fraction(cb),), (tb,), self.shape(tb))
        s = _bshape(self.shape(ta), self.shape(tb))
        return self.terms.make("add", (), tuple(sorted((ta, tb))), s), lambda env: fa(env) + Fraction(cb) * fb(env)

    def mul(self, a, b):
        (ta, fa), (tb, fb) = a, b
        s = _bshape(self.shape(ta), self.shape(tb))
        return self.terms.make("mul", (), tuple(sorted((ta, tb))), s), lambda env: fa(env) * fb(env)

    def const(self, a, c):
        ta, fa = a
        return self.terms.make("add_const", (Fraction(c),), (ta,), self.shape(ta)), lambda env: fa(env) + Fraction(c)

    def div(self, a, b):
        """a / (b*b + 1): a divisor that is never zero."""
        (ta, fa), (tb, fb) = a, b
        sq = self.mul(b, b)
        d = self.const(sq, 1)
        s = _bshape(self.shape(ta), self.shape(d[0]))
        return self.terms.make("div", EXACT_DIV, (ta, d[0]), s), lambda env: fa(env) / d[1](env)

    def sum(self, a):
        ta, fa = a
        s = self.shape(ta)
        if len(s) != 2 or s[1] == 1:
            return a
        return (self.terms.make("sum", SUM1, (ta,), (s[0], 1)),
                lambda env: np.sum(np.broadcast_to(fa(env), s), axis=1, keepdims=True))


def _expr(draw, b: Builder, depth=0):
    kind = draw(st.sampled_from(["leaf", "leaf", "add", "sub", "mul", "mul", "const", "sum", "div"]
                                if depth < 3 else ["leaf"]))
    if kind == "leaf":
        return b.leaf(draw(st.sampled_from(sorted(SHAPES))))
    if kind in ("const", "sum"):
        a = _expr(draw, b, depth + 1)
        return b.const(a, draw(st.integers(-2, 2))) if kind == "const" else b.sum(a)
    a, c = _expr(draw, b, depth + 1), _expr(draw, b, depth + 1)
    if kind == "div":
        return b.div(a, c)
    return b.mul(a, c) if kind == "mul" else b.add(a, c, -1 if kind == "sub" else 1)


def _env(rng):
    return {k: np.array([[Fraction(int(v), int(d)) for v, d in zip(r1, r2)] for r1, r2 in
                         zip(rng.integers(-5, 6, (int(np.prod(s)), 1)), rng.integers(1, 4, (int(np.prod(s)), 1)))],
                        dtype=object).reshape(s) for k, s in SHAPES.items()}


def _value(f, t, b, env):
    return np.broadcast_to(f(env), b.shape(t))


@SETTINGS
@given(st.data())
def test_one_normal_form_means_equal_exact_values(data):
    """Random expressions over four inputs (broadcast shapes, row sums, divisions): any two
    with one normal form evaluate to the same rationals on random rational inputs."""
    b = Builder()
    exprs = [_expr(data.draw, b) for _ in range(6)]
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    _one_form_same_values(b, exprs, [_env(rng) for _ in range(3)])


def _one_form_same_values(b: Builder, exprs: list, envs: list) -> None:
    for i, (ti, fi) in enumerate(exprs):
        for tj, fj in exprs[i + 1:]:
            if ti != tj and same_polynomial(b.terms, ti, tj):
                for env in envs:
                    assert (_value(fi, ti, b, env) == _value(fj, tj, b, env)).all(), \
                        (b.terms.describe(ti, 8), b.terms.describe(tj, 8))


def _scale(b: Builder, a, c):
    return b.terms.make("scale", (Fraction(c),), (a[0],), b.shape(a[0])), lambda env, f=a[1]: Fraction(c) * f(env)


def _variances(b: Builder, p, divisor: int):
    """(Σ(p - m)²/divisor, Σp²/n - m²) with m = Σp/n over the rows of p."""
    n = b.shape(p[0])[1]
    m = _scale(b, b.sum(p), Fraction(1, n))
    centered = b.add(p, m, -1)
    return (_scale(b, b.sum(b.mul(centered, centered)), Fraction(1, divisor)),
            b.add(_scale(b, b.sum(b.mul(p, p)), Fraction(1, n)), b.mul(m, m), -1))


def _template(draw, b: Builder, kind: str, near_miss: bool):
    """Two spellings of one value (or, as a near miss, of two values) over random parts."""
    p, q, r = (_expr(draw, b, 2) for _ in range(3))
    if kind == "distribute":
        return b.mul(p, b.add(q, r)), b.add(b.mul(p, q), b.mul(q if near_miss else p, r))
    if kind == "pull_out":
        c = p if near_miss else b.sum(b.mul(p, b.leaf("x")))  # a row constant (or, as a near miss, any p)
        if b.sum(q) is q:  # q has no row to sum (b.sum leaves it): Σ(c·q) is not c·q then
            q = b.mul(q, b.leaf("x"))
        return b.sum(b.mul(c, q)), b.mul(c, b.sum(q))
    full = b.mul(p, b.leaf("x"))
    return _variances(b, full, b.shape(full[0])[1] - (1 if near_miss else 0))


@SETTINGS
@given(st.data())
def test_respelled_identities_are_found_and_hold_exactly(data):
    """A random expression plus one side of a known identity (distribution, a row constant
    out of a row sum, the centered variance as E[h²] - E[h]²) against the same expression
    plus the other side: the identity is found, and agrees with exact values; a near miss
    (a factor swapped, a varying factor pulled out, an n-1 divisor) is told apart only by
    the values, and the normal form must not call it equal unless they are."""
    b = Builder()
    a = _expr(data.draw, b)
    kind = data.draw(st.sampled_from(["distribute", "pull_out", "variance"]))
    near_miss = data.draw(st.booleans())
    left, right = _template(data.draw, b, kind, near_miss)
    one, two = b.add(a, left), b.add(a, right)
    if b.shape(one[0]) != b.shape(two[0]):
        return
    found = same_polynomial(b.terms, one[0], two[0])
    if not near_miss:
        assert found, (kind, b.terms.describe(one[0], 8), b.terms.describe(two[0], 8))
    if found:
        for env in (_env(np.random.default_rng(seed)) for seed in range(2)):
            assert (_value(one[1], one[0], b, env) == _value(two[1], two[0], b, env)).all(), kind


def test_known_identities_and_non_identities():
    b = Builder()
    x, y, z, w = (b.leaf(k) for k in ("x", "y", "z", "w"))
    n = SHAPES["x"][1]
    same = [
        (b.mul(b.add(x, z), w), b.add(b.mul(x, w), b.mul(z, w))),          # distribution
        (b.sum(b.mul(y, x)), b.mul(y, b.sum(x))),                           # a row constant leaves a sum
    ]
    s1, s2 = b.sum(x), b.sum(b.mul(x, x))
    scale = lambda a, c: (b.terms.make("scale", (Fraction(c),), (a[0],), b.shape(a[0])),  # noqa: E731
                          lambda env, f=a[1]: Fraction(c) * f(env))
    m = scale(s1, Fraction(1, n))
    centered = b.add(x, m, -1)
    var_centered = scale(b.sum(b.mul(centered, centered)), Fraction(1, n))
    var_moments = b.add(scale(s2, Fraction(1, n)), b.mul(m, m), -1)
    same.append((var_centered, var_moments))                                # E[(h-m)^2] = E[h^2] - E[h]^2
    differ = [
        (scale(b.sum(b.mul(centered, centered)), Fraction(1, n - 1)), var_moments),  # n-1 divisor
        (b.mul(b.add(x, z), b.add(x, z)), b.add(b.mul(x, x), b.mul(z, z))),          # missing cross term
        (b.sum(b.mul(z, x)), b.mul(z, b.sum(x))),                                    # z is not row-constant
    ]
    for a, c in same:
        assert same_polynomial(b.terms, a[0], c[0]), (b.terms.describe(a[0], 8), b.terms.describe(c[0], 8))
    for a, c in differ:
        assert not same_polynomial(b.terms, a[0], c[0]), (b.terms.describe(a[0], 8), b.terms.describe(c[0], 8))
    env = _env(np.random.default_rng(0))
    for a, c in same:
        assert (_value(a[1], a[0], b, env) == _value(c[1], c[0], b, env)).all()
    for a, c in differ:
        assert not (_value(a[1], a[0], b, env) == _value(c[1], c[0], b, env)).all()
    # x*z/z is not x: where z = 0 the left side is undefined (a division never cancels)
    xz = b.terms.make("mul", (), tuple(sorted((x[0], z[0]))), SHAPES["x"])
    assert not same_polynomial(b.terms, b.terms.make("div", EXACT_DIV, (xz, z[0]), SHAPES["x"]), x[0])


def test_layer_norm_expansion_holds_torch_values():
    """The normal form of a layer_norm term is its definition: evaluating the expansion's
    atoms (sqrt, inverse, row sums) in float64 gives torch's layer norm."""
    terms = TermStore()
    x = terms.make("input", ("x", "f32"), (), (4, 5))
    w = terms.make("input", ("w", "f32"), (), (5,))
    bias = terms.make("input", ("b", "f32"), (), (5,))
    eps = Fraction(1e-5)
    ln = terms.make("layer_norm", ("$", (5,), "$", "$", eps, (), 0), (x, w, bias), (4, 5))
    norm = Normalizer(terms)
    form = norm.form(ln)
    g = torch.Generator().manual_seed(1)
    vals = {x: torch.randn(4, 5, generator=g, dtype=torch.float64), w: torch.randn(5, generator=g, dtype=torch.float64),
            bias: torch.randn(5, generator=g, dtype=torch.float64)}
    want = F.layer_norm(vals[x], (5,), vals[w], vals[bias], float(eps))
    assert torch.allclose(float_value(norm, vals, form), want, atol=1e-10)


def float_value(norm: Normalizer, vals: dict, form) -> torch.Tensor:
    """A normal form evaluated in float64, its leaves given (term id -> tensor): each atom by
    its key (a row sum, sqrt, an inverse, an atom viewed in another shape)."""
    keys = {v: k for k, v in norm.atoms.items()}

    def atom_value(aid):
        key = keys[aid]
        if key[0] == "leaf":
            return vals[key[1]]
        if key[0] == "sum":
            _, dims, full, inside = key
            return torch.broadcast_to(mono(inside), full).sum(dim=dims, keepdim=True)
        if key[0] == "sqrt":
            return torch.sqrt(poly(dict(key[1])))
        if key[0] == "inv":
            return 1 / (mono(key[1]) if key[1] and isinstance(key[1][0][0], int) else poly(dict(key[1])))
        if key[0] == "view":  # the viewed atom's (unbroadcast) value in its new shape
            base = atom_value(key[1])
            return torch.broadcast_to(base, norm.atom_shape[key[1]]).reshape(key[2])
        raise AssertionError(key)

    def mono(m):
        out = torch.ones((), dtype=torch.float64)
        for aid, k in m:
            out = out * atom_value(aid) ** k
        return out

    def poly(p):
        return sum(float(c) * mono(m) for m, c in p.items())
    return poly(form)


# ---------------------------------------------------------------- size-1 reshapes, batch norm

def _view(b: Builder, a, shape):
    ta, fa = a
    old = b.shape(ta)
    return (b.terms.make("reshape", (tuple(shape),), (ta,), tuple(shape)),
            lambda env: np.broadcast_to(fa(env), old).reshape(shape))


def _row_sum_squeezed(b: Builder, a):
    """Σ over dim 1 without keepdim, viewed back as a column (torch's sum(1).view(-1, 1))."""
    ta, fa = a
    s = b.shape(ta)
    if len(s) != 2 or s[1] == 1:
        return a
    flat = (b.terms.make("sum", ((1,), False, None), (ta,), (s[0],)),
            lambda env: np.sum(np.broadcast_to(fa(env), s), axis=1))
    return _view(b, flat, (s[0], 1))


def _viewed_expr(draw, b: Builder, depth=0):
    """_expr with size-1 reshapes among its ops: sums without keepdim viewed back, a
    leading 1 added or dropped, a column squeezed and unsqueezed, a column laid as a row."""
    kind = draw(st.sampled_from(["expr", "squeezed_sum", "lift", "drop", "roundtrip", "row", "mul", "add"]
                                if depth < 2 else ["expr"]))
    if kind == "expr":
        return _expr(draw, b, 2)
    if kind in ("mul", "add"):
        a, c = _viewed_expr(draw, b, depth + 1), _viewed_expr(draw, b, depth + 1)
        try:
            return b.mul(a, c) if kind == "mul" else b.add(a, c)
        except ValueError:  # shapes that do not broadcast
            return a
    a = _viewed_expr(draw, b, depth + 1)
    s = b.shape(a[0])
    if kind == "squeezed_sum":
        return _row_sum_squeezed(b, a)
    if kind == "lift":
        return _view(b, a, (1,) + s)
    if kind == "drop":
        return _view(b, a, s[1:]) if len(s) > 1 and s[0] == 1 else a
    if kind == "roundtrip":
        return _view(b, _view(b, a, tuple(d for d in s if d != 1) or (1,)), s)
    return _view(b, a, (1, s[0])) if s == (2, 1) else a  # the column as a row: a different value


@SETTINGS
@given(st.data())
def test_size_one_reshapes_keep_exact_values(data):
    """Random expressions with size-1 reshapes (keepdim-less sums viewed back, leading 1s,
    squeeze/unsqueeze round trips, a column viewed as a row): any two with one normal form
    evaluate to the same rationals; a row sum without keepdim viewed back is the keepdim sum."""
    b = Builder()
    exprs = [_viewed_expr(data.draw, b) for _ in range(6)]
    _one_form_same_values(b, exprs, [_env(np.random.default_rng(data.draw(st.integers(0, 2 ** 16))))
                                     for _ in range(2)])
    x = b.leaf("x")
    assert same_polynomial(b.terms, _row_sum_squeezed(b, x)[0], b.sum(x)[0])


def test_size_one_reshape_identities_and_non_identities():
    """Moments from keepdim-less sums viewed as columns are the centered variance; a column
    viewed as a row, or a sum over the other dim, is not."""
    b = Builder()
    x, y = b.leaf("x"), b.leaf("y")
    n = SHAPES["x"][1]
    m = _scale(b, _row_sum_squeezed(b, x), Fraction(1, n))
    moments = b.add(_scale(b, _row_sum_squeezed(b, b.mul(x, x)), Fraction(1, n)), b.mul(m, m), -1)
    centered_var = _variances(b, x, n)[0]
    assert same_polynomial(b.terms, moments[0], centered_var[0])
    col = _view(b, _view(b, y, (2,)), (2, 1))
    assert same_polynomial(b.terms, b.mul(col, x)[0], b.mul(y, x)[0])
    row = _view(b, y, (1, 2))
    assert not same_polynomial(b.terms, b.mul(row, row)[0], b.mul(y, y)[0])  # (1, 2) and (2, 1): not one value
    env = _env(np.random.default_rng(0))
    assert (_value(moments[1], moments[0], b, env) == _value(centered_var[1], centered_var[0], b, env)).all()
    other = b.terms.make("sum", ((0,), False, None), (x[0],), (3,))  # over dim 0: a (3,) of column sums
    assert not same_polynomial(b.terms, _view(b, (other, None), (3, 1))[0], _view(b, (other, None), (1, 3))[0])


def test_batch_norm_expansion_holds_torch_values():
    """Training-mode batch norm (the engine's batch_norm term: weight and bias viewed as
    [C, 1, 1]) expands to its definition, which evaluates to torch's F.batch_norm; by hand
    from keepdim-less per-channel sums viewed as [1, C, 1, 1] it has the same normal form,
    and with the n - 1 divisor it has not."""
    terms = TermStore()
    shape = (4, 3, 2, 2)
    x = terms.make("input", ("x", "f32"), (), shape)
    w, bias = (terms.make("input", (k, "f32"), (), (3,)) for k in ("w", "b"))
    eps = Fraction(1e-5)
    col = [terms.make("reshape", ((3, 1, 1),), (p,), (3, 1, 1)) for p in (w, bias)]
    bn = terms.make("batch_norm", (eps, (True, True)), (x, *col), shape)
    norm = Normalizer(terms)
    g = torch.Generator().manual_seed(1)
    vals = {x: torch.randn(*shape, generator=g, dtype=torch.float64),
            w: torch.randn(3, generator=g, dtype=torch.float64), bias: torch.randn(3, generator=g, dtype=torch.float64)}
    want = F.batch_norm(vals[x], None, None, vals[w], vals[bias], training=True, eps=float(eps))
    assert torch.allclose(float_value(norm, vals, norm.form(bn)), want, atol=1e-10)
    _, mean, inv_std = torch.ops.aten._native_batch_norm_legit(vals[x], vals[w], vals[bias], True, 0.1, float(eps))
    for i, saved in enumerate((mean, inv_std)):  # the saved statistics its backward reads
        stat = terms.make("batch_norm_stats", (eps, i), (x,), (3,))
        assert torch.allclose(float_value(norm, vals, norm.form(stat)), saved, atol=1e-10), i
    for divisor, same in ((16, True), (15, False)):
        assert same_polynomial(terms, _synced_batch_norm(terms, x, w, bias, eps, divisor), bn) is same, divisor


def _synced_batch_norm(terms: TermStore, x, w, bias, eps, divisor):
    """(x - mean)·rsqrt(var + eps)·w + b from per-channel sums without keepdim, var = (Σx² - Σx·mean)/divisor."""
    shape, c4 = terms.shape(x), (1, 3, 1, 1)
    mk = terms.make
    s1 = mk("sum", ((0, 2, 3), False, None), (x,), (3,))
    s2 = mk("sum", ((0, 2, 3), False, None), (mk("mul", (), (x, x), shape),), (3,))
    mean = mk("scale", (Fraction(1, 16),), (s1,), (3,))
    var = mk("scale", (Fraction(1, divisor),), (mk("lin", (1, -1), (s2, mk("mul", (), (s1, mean), (3,))), (3,)),), (3,))
    view = lambda t: mk("reshape", (c4,), (t,), c4)  # noqa: E731
    centered = mk("lin", (1, -1), (x, view(mean)), shape)
    root = mk("rsqrt", ("$", ()), (mk("add_const", (eps,), (view(var),), c4),), c4)
    y = mk("mul", (), (mk("mul", (), (centered, root), shape), view(w)), shape)
    return mk("add", (), tuple(sorted((y, view(bias)))), shape)
