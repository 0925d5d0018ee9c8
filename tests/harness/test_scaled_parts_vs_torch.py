"""The factor inside a selection, a concatenation with zero blocks and a multi-part linear form
(src/shardproof/algebra/scaling.py), taken out where an op linear in them is built, judged by
torch. Each program below runs through the op rules on a gradient ``g`` and on ``c·g`` for a
drawn exact c, in one term store: every value is claimed with torch's (two spellings sharing a
term must agree) and every claimed term is checked against its own value on the inputs
(term_values.check_terms); the scaled program's result is c times the unscaled one's term. A
rule taking out twice the factor is refused by the same checks."""
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardproof.algebra import lemmas
from shardproof.algebra.layout import full
from shardproof.algebra.terms import TermStore

from .core import Claims, Draw, T, _pairs, apply_rule, examples, magnitude, run_torch, to_np, tolerance
from .term_values import check_terms

A = "aten."
N, D = 3, 4  # g and x are [N, D]
# each program: (op, args) steps on the running names; "h" is the gradient, s<i> step i's result
PROGRAMS = {
    # a selection of the scaled gradient written between zeros, then scaled and summed
    "gather": [(A + "slice", (T("h"), 1, 0, 2)), (A + "slice_backward", (T("s0"), [N, D + 2], 1, 1, 3, 1)),
               (A + "mul", (T("s1"), 3.0)), (A + "sum", (T("s2"), [1], True))],
    # the whole gradient between zeros (slice_backward's concatenation), scaled
    "cat": [(A + "slice_backward", (T("h"), [N, D + 2], 1, 1, D + 1, 1)), (A + "mul", (T("s0"), -2.0)),
            (A + "sum", (T("s1"), [0], False))],
    # two branches of the gradient meet, then a product: the sum's leading coefficient
    "lin": [(A + "mul", (T("h"), T("x"))), (A + "sub", (T("h"), T("s0"))), (A + "mul", (T("s1"), T("x")))],
    # RoPE's rotate_half backward: the halves negated and swapped between zeros, added, times x
    "rope": [(A + "slice", (T("h"), 1, 0, 2)), (A + "neg", (T("s0"),)),
             (A + "slice_backward", (T("s1"), [N, D], 1, 2, D, 1)), (A + "slice", (T("h"), 1, 2, D)),
             (A + "slice_backward", (T("s3"), [N, D], 1, 0, 2, 1)), (A + "add", (T("s2"), T("s4"))),
             (A + "mul", (T("s5"), T("x")))],
}


def _run(steps, tensors: dict, vals: dict, terms: TermStore, claims: Claims, who: str):
    tens, env = dict(tensors), dict(vals)
    for i, (op, args) in enumerate(steps):
        d = Draw(op, tens, ())
        out = run_torch(d, tens, args, {})
        got = apply_rule(d, terms, env, tens, args, {}, out, 0, 1)
        (v, o), = _pairs(got, out)[:1]
        claims.add(v, to_np(o), f"{who} step {i} ({op})")
        tens[f"s{i}"], env[f"s{i}"] = o, v
    return env[f"s{len(steps) - 1}"]


def _pair(steps, c: Fraction, seed: int):
    """The program on g and on c·g in one store, every claim judged: (unscaled, scaled, store)."""
    gen = np.random.default_rng(seed)
    base = {k: torch.from_numpy(gen.integers(-3, 4, size=(N, D)).astype(np.float64)) for k in ("g", "x")}
    terms = TermStore()
    vals = {k: full(terms, terms.make("input", (k, "f64"), (), (N, D))) for k in base}
    claims = Claims(terms, tolerance([torch.float64], magnitude([to_np(t) for t in base.values()]), 64) * 1e3)
    plain = _run(steps, {**base, "h": base["g"]}, {**vals, "h": vals["g"]}, terms, claims, "unscaled")
    scaled_g = base["g"] * float(c)
    h = apply_rule(Draw(A + "mul", base, ()), terms, vals, base, (T("g"), float(c)), {}, scaled_g, 0, 1)
    claims.add(h, to_np(scaled_g), "c*g")
    scaled = _run(steps, {**base, "h": scaled_g}, {**vals, "h": h}, terms, claims, "scaled")
    assert check_terms(claims, {k: to_np(v) for k, v in base.items()}) > 0
    return plain, scaled, terms


COEFS = st.sampled_from([Fraction(1, 4), Fraction(4), Fraction(-1, 2), Fraction(3, 8), Fraction(-3)])


@settings(max_examples=examples(8), deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(program=st.sampled_from(sorted(PROGRAMS)), c=COEFS, seed=st.integers(0, 9))
def test_the_factor_floats_to_the_top(program, c, seed):
    # a linear form gives up a positive factor only (its largest coefficient made 1, the sign kept)
    assume(c > 0 or program not in ("lin", "rope"))
    plain, scaled, terms = _pair(PROGRAMS[program], c, seed)
    assert [None if v is None else list(v) for v in plain.vecs] == [None if v is None else list(v) for v in scaled.vecs]
    # c times the unscaled result's term (which may carry a factor of its own: the 3, the -2)
    p, k = lemmas.scaled_part(terms, plain.t) or (plain.t, 1)
    q, m = lemmas.scaled_part(terms, scaled.t) or (scaled.t, 1)
    assert (q, m) == (p, k * c), (terms.describe(plain.t), terms.describe(scaled.t), k, m)


def _doubled(real):
    def rule(terms, t):
        found = real(terms, t)
        return None if found is None else (found[0], found[1] * 2)
    return rule


@pytest.mark.parametrize("head,program", [("gather", "gather"), ("cat", "cat"), ("lin", "lin"), ("cat", "rope")])
def test_a_wrong_factor_is_refused(monkeypatch, head, program):
    """Twice the factor taken out of a selection, a concatenation, a sum: the term built over
    it is claimed with torch's value, which is not the term's own value on the inputs."""
    monkeypatch.setitem(lemmas.SCALED_PARTS, head, _doubled(lemmas.SCALED_PARTS[head]))
    with pytest.raises(AssertionError, match="the rules claim term|disagree|differ"):
        _pair(PROGRAMS[program], Fraction(1, 4), 0)
