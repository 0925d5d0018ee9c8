"""Soundness of the scalar-factor normal form (the leading coefficient of a linear form,
lemmas.scaled_part), with torch as the judge.

A drawn chain of backward-like ops (slice_backward into zeros, elementwise products, sums
over dims, matrix products, additions of two branches, concatenation with zeros,
selections, activation backwards) runs on a gradient ``g`` and on ``c * g`` for a drawn
exact c, in one hash-consed term store: every term claimed is claimed with torch's value
(two spellings that share a term must agree element by element), and the scaled chain's
result is the unscaled one's times c (VJPs are linear in the incoming gradient: the factor
floats to the top). A rule that takes out a wrong factor is refused by the same claims."""
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.algebra.lemmas import scaled_part
from shardproof.algebra.terms import TermStore

from .core import Claims, Draw, T, _pairs, apply_rule, examples, magnitude, run_torch, to_np, tolerance

SETTINGS = settings(max_examples=examples(60), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."
N, D = 3, 4  # the chain's value is [N, D]; w is [D, D], x is [N, D]


def _step(draw, i: int):
    """One op on the running value h (``s<i-1>``): (op, builder(shapes) -> (args, kwargs))."""
    h = T(f"s{i - 1}") if i else T("h")
    kind = draw(st.sampled_from(["mul", "mm", "add", "slice_backward", "cat0", "slice", "sum", "threshold",
                                 "silu", "neg", "sub"]))
    if kind == "mul":
        return A + "mul", lambda s: ((h, T("x")), {})
    if kind == "mm":
        return A + "mm", lambda s: ((h, T("w")), {})
    if kind in ("add", "sub"):  # two branches of the gradient meet (both carry the factor; see _run)
        return A + kind, lambda s: ((h, T("branch")), {})
    if kind == "slice_backward":  # then sliced back to [N, D] so the chain keeps its shape
        return A + "slice_backward", lambda s: ((h, [N, D + 2], 1, 1, D + 1, 1), {})
    if kind == "cat0":
        return A + "cat", lambda s: (([h, T("zeros")], 1), {})
    if kind == "slice":
        return A + "slice", lambda s: ((h, 1, 0, D), {})
    if kind == "sum":
        return A + "sum", lambda s: ((h, [1], True), {})
    if kind == "threshold":
        return A + "threshold_backward", lambda s: ((h, T("x"), 0.0), {})
    if kind == "silu":
        return A + "silu_backward", lambda s: ((h, T("x")), {})
    return A + "neg", lambda s: ((h,), {})


def _run(steps, tensors: dict, vals: dict, terms: TermStore, claims: Claims, who: str):
    """Each step through its relation rule (one device) and torch; every output claimed."""
    tens, env = dict(tensors), dict(vals)
    for i, (op, build) in enumerate(steps):
        prev = f"s{i - 1}" if i else "h"
        # the other branch of an add/sub: the running value times x (a real second path)
        same = tens[prev].shape == tens["x"].shape
        tens["branch"] = tens[prev] * tens["x"] if same else tens[prev] * 2
        d = Draw(A + "mul", tens, ())
        args = (T(prev), T("x")) if same else (T(prev), 2)
        env["branch"] = apply_rule(d, terms, env, tens, args, {}, tens["branch"], 0, 1)
        claims.add(env["branch"], to_np(tens["branch"]), f"{who} branch {i}")
        d = Draw(op, tens, ())
        args, kwargs = build({k: tuple(v.shape) for k, v in tens.items()})
        out = run_torch(d, tens, args, kwargs)
        got = apply_rule(d, terms, env, tens, args, kwargs, out, 0, 1)
        (v, o), = _pairs(got, out)[:1]
        claims.add(v, to_np(o), f"{who} step {i} ({op})")
        tens[f"s{i}"], env[f"s{i}"] = o, v
        if op == A + "slice_backward":  # back to [N, D]
            tens[f"s{i}"] = o[:, 1:D + 1]
            d = Draw(A + "slice", tens, ())
            env[f"s{i}"] = apply_rule(d, terms, {**env, "o": v}, {**tens, "o": o}, (T("o"), 1, 1, D + 1), {},
                                      tens[f"s{i}"], 0, 1)
            claims.add(env[f"s{i}"], to_np(tens[f"s{i}"]), f"{who} step {i} sliced back")
        elif op == A + "cat":
            tens[f"s{i}"] = o[:, :D]
            d = Draw(A + "slice", tens, ())
            env[f"s{i}"] = apply_rule(d, terms, {**env, "o": v}, {**tens, "o": o}, (T("o"), 1, 0, D), {},
                                      tens[f"s{i}"], 0, 1)
        elif op == A + "sum":
            tens[f"s{i}"] = o.expand(N, D)
            d = Draw(A + "expand", tens, ())
            env[f"s{i}"] = apply_rule(d, terms, {**env, "o": v}, {**tens, "o": o}, (T("o"), [N, D]), {},
                                      tens[f"s{i}"], 0, 1)
    last = f"s{len(steps) - 1}"
    return env[last], tens[last]


def _chain_pair(steps, c: Fraction, seed: int, factor_hook=None):
    """The chain on g and on c·g in one store; (unscaled Val, scaled Val, store)."""
    from shardproof.algebra.layout import full
    gen = np.random.default_rng(seed)
    base = {k: torch.from_numpy(gen.integers(-3, 4, size=s).astype(np.float64))
            for k, s in (("g", (N, D)), ("x", (N, D)), ("w", (D, D)))}
    base["zeros"] = torch.zeros(N, 2, dtype=torch.float64)
    terms = TermStore()
    vals = {k: full(terms, terms.make("input", (k, "f64"), (), tuple(v.shape))) for k, v in base.items()
            if k != "zeros"}
    vals["zeros"] = full(terms, terms.make("fill", (0,), (), (N, 2)))
    claims = Claims(terms, tolerance([torch.float64], magnitude([to_np(t) for t in base.values()]), 64) * 1e3)
    for k, v in base.items():
        claims.add(vals[k], to_np(v), f"input {k}")
    plain, _ = _run(steps, {**base, "h": base["g"]}, {**vals, "h": vals["g"]}, terms, claims, "unscaled")
    scaled_g = base["g"] * float(c)
    d = Draw(A + "mul", {**base}, ())
    h = apply_rule(d, terms, vals, base, (T("g"), float(c)), {}, scaled_g, 0, 1)
    claims.add(h, to_np(scaled_g), "c*g")
    scaled, _ = _run(steps, {**base, "h": scaled_g}, {**vals, "h": h}, terms, claims, "scaled")
    _linear_forms_agree(terms, claims)
    return plain, scaled, terms


def _linear_forms_agree(terms: TermStore, claims: Claims) -> None:
    """Every linear form ``Σ c_i t_i`` claimed wholly, whose parts are claimed wholly too,
    holds Σ c_i (torch's value of t_i): the factor a rewrite took out is the real one."""
    for t, (value, seen) in claims.known.items():
        term = terms[t]
        if term.op != "lin" or not seen.all():
            continue
        parts = [claims.known.get(k) for k in term.children]
        if any(p is None or not p[1].all() for p in parts):
            continue
        total = sum(float(c) * np.broadcast_to(p[0], term.shape) for c, p in zip(term.attrs, parts))
        assert np.allclose(total, value, atol=claims.atol), (
            f"the linear form {terms.describe(t)} is claimed with torch's values, which are not the sum of its "
            f"parts' values times their coefficients")


COEFS = st.sampled_from([Fraction(1, 4), Fraction(4), Fraction(-1, 2), Fraction(3, 8), Fraction(1, 3)])


@SETTINGS
@given(st.data())
def test_scaled_gradient_chain_holds_torch_values_and_keeps_the_factor(data):
    steps = [_step(data.draw, i) for i in range(data.draw(st.integers(1, 5)))]
    c = data.draw(COEFS)
    if float(c) != c:  # 1/3 is not a float: the capture's constant is the float nearest it
        c = Fraction(float(c))
    plain, scaled, terms = _chain_pair(steps, c, data.draw(st.integers(0, 9)))
    assert [None if v is None else list(v) for v in plain.vecs] == [None if v is None else list(v) for v in scaled.vecs]
    found = scaled_part(terms, scaled.t)
    assert found is not None, terms.describe(scaled.t)
    inner, k = found
    # c·(unscaled): the scaled chain is the unscaled chain's term times c, or both normalised alike
    base = scaled_part(terms, plain.t)
    assert (inner, k) == (plain.t, c) or (base is not None and (inner, k) == (base[0], base[1] * c)), \
        (terms.describe(plain.t), terms.describe(scaled.t), k)


def test_a_wrong_leading_coefficient_is_refused(monkeypatch):
    """The leading coefficient of a sum taken out twice over (c·a + c·b read as 2c·(a + b))
    before a product: refused the same way."""
    from shardproof.algebra import lemmas
    real = lemmas.scaled_part

    def doubled(terms, t):
        found = real(terms, t)
        if found is None or terms[t].op != "lin" or len(terms[t].children) < 2:
            return found
        return found[0], found[1] * 2
    monkeypatch.setattr(lemmas, "scaled_part", doubled)
    steps = [(A + "add", lambda s: ((T("h"), T("branch")), {})), (A + "mul", lambda s: ((T("s0"), T("x")), {}))]
    with pytest.raises(AssertionError, match="not the sum of its parts"):
        _chain_pair(steps, Fraction(1, 4), 0)
