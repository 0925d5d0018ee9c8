"""Soundness of issue 15's normal forms ("the same math written another way"), with torch as
the judge: every term two spellings share must hold torch's value for both.

- negation normal form (De Morgan, complements of comparisons) over integer values;
- views distributed over linear forms (a bias broadcast over the leading dims of a view);
- SDPA's default scale identified with an explicit ``1/sqrt(d)`` (torch gives equal arrays);
- input-independent tables related by value: the block found is exactly equal."""
import math

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.algebra.layout import Val, full
from shardproof.algebra.masks import negated
from shardproof.algebra.terms import TermStore
from shardproof.engine.tables import block_of

from . import draws
from .core import Claims, T, examples
from .test_chains_vs_torch import run_drawn_chain

SETTINGS = settings(max_examples=examples(60), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."
COMPARE = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}


def _formula(draw, depth: int = 0):
    """A random and/or/not formula over comparisons of x with small constants:
    (term builder, torch evaluator)."""
    kind = draw(st.sampled_from(["cmp", "cmp", "and", "or", "not"] if depth < 3 else ["cmp"]))
    if kind == "cmp":
        op, c = draw(st.sampled_from(sorted(COMPARE))), draw(st.integers(-2, 2))
        return (lambda terms, x: terms.make(op, ("$", c, ()), (x,), terms.shape(x)),
                lambda x: COMPARE[op](x, c))
    if kind == "not":
        b, f = _formula(draw, depth + 1)
        return (lambda terms, x: negated(terms, b(terms, x))), (lambda x: ~f(x))
    (b1, f1), (b2, f2) = _formula(draw, depth + 1), _formula(draw, depth + 1)
    tf = torch.logical_and if kind == "and" else torch.logical_or
    return (lambda terms, x: terms.make(kind, ("$", "$", ()), tuple(sorted((b1(terms, x), b2(terms, x)))),
                                        terms.shape(x)),
            lambda x: tf(f1(x), f2(x)))


@SETTINGS
@given(st.data())
def test_negation_normal_form_holds_torch_values_on_integers(data):
    """Formulas and their negations built in one store: a term shared by two spellings (a
    complement, a De Morgan dual) is claimed with torch's value each time."""
    # ids are non-negative (the engine's stated convention makes ``ids != -1`` true)
    x = torch.tensor(data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=6)), dtype=torch.int64)
    terms = TermStore()
    xt = terms.make("input", ("x", "i64"), (), tuple(x.shape))
    claims = Claims(terms, 0.0)
    for _ in range(4):
        build, value = _formula(data.draw)
        t = build(terms, xt)
        claims.add(full(terms, t), value(x).numpy().astype(float), "formula")
        claims.add(full(terms, negated(terms, t)), (~value(x)).numpy().astype(float), "its negation")


def test_negation_is_not_pushed_through_float_comparisons():
    """``~(x < c)`` is not ``x >= c`` where x may be NaN: the rule keeps a plain negation."""
    from shardproof import Case
    from shardproof.api import verify_case
    single = lambda x: {"out": ((x < 0) | (x >= 1)).float()}  # noqa: E731
    nnf = lambda x: {"out": (~((x >= 0) & (x < 1))).float()}  # noqa: E731
    nan = torch.tensor([float("nan")])
    assert not torch.equal(single(nan)["out"], nnf(nan)["out"])  # they differ on NaN (torch is the judge)
    x = torch.tensor([0.5, -1.0, 2.0, 0.25])
    report = verify_case(Case(single=single, distributed=lambda rank, world: nnf, inputs={"x": x}, world_size=2,
                              expect={"out": "Replicate()"}))
    assert report.status != "verified"
    ints = verify_case(Case(single=single, distributed=lambda rank, world: nnf, inputs={"x": torch.arange(-2, 3)},
                            world_size=2, expect={"out": "Replicate()"}))
    assert ints.status == "verified", ints.reason


@SETTINGS
@given(st.data())
def test_a_view_of_a_sum_with_a_broadcast_part(data):
    """``reshape(x + b)`` and ``reshape(x) + b`` (b over trailing dims) share terms only
    where torch agrees, on sharded layouts."""
    draws.MODE["rule"] = True
    try:
        lead = data.draw(st.sampled_from([(4, 3), (2, 6), (6, 2)]))
        x = draws.tensor(data.draw, (lead[0] * lead[1], 4), dts=(draws.F64,))
        b = draws.tensor(data.draw, data.draw(st.sampled_from([(4,), (1, 4)])), dts=(draws.F64,))
        shape = [lead[0], lead[1], 4]
        steps = [(A + "add", lambda s: ((T("x"), T("b")), {})),
                 (A + "view", lambda s: ((T("s0"), shape), {})),
                 (A + "view", lambda s: ((T("x"), shape), {})),
                 (A + "add", lambda s: ((T("s2"), T("b")), {})),
                 (A + "sub", lambda s: ((T("s1"), T("s3")), {}))]
    finally:
        draws.MODE["rule"] = False
    run_drawn_chain(data.draw, {"x": x, "b": b}, steps)


def test_sdpa_default_scale_is_the_explicit_one_exactly():
    """torch computes the default scale as Python's 1/math.sqrt(d): equal outputs, bit for bit."""
    from shardproof.ops.aten_attention import _sdpa_scale
    g = torch.Generator().manual_seed(0)
    for d in (3, 7, 8, 64, 80):
        q, k, v = (torch.randn(2, 3, 5, d, generator=g) for _ in range(3))
        assert torch.equal(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                           F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(d)))
        terms = TermStore()
        qv = full(terms, terms.make("input", ("q", "f32"), (), tuple(q.shape)))
        assert _sdpa_scale(terms, qv, None) == _sdpa_scale(terms, qv, 1 / math.sqrt(d))
        assert _sdpa_scale(terms, qv, None) != _sdpa_scale(terms, qv, 1 / math.sqrt(d + 1))


@SETTINGS
@given(st.data())
def test_a_table_block_is_exactly_equal(data):
    """A block found is element for element the part; a part that is no block is refused."""
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    whole = np.asarray(data.draw(st.lists(st.integers(0, 2), min_size=int(np.prod(shape)),
                                          max_size=int(np.prod(shape))))).reshape(shape).astype(float)
    part_shape = tuple(data.draw(st.integers(1, s)) for s in shape)
    offs = tuple(data.draw(st.integers(0, s - p)) for s, p in zip(shape, part_shape))
    part = whole[tuple(slice(o, o + p) for o, p in zip(offs, part_shape))].copy()
    if data.draw(st.booleans()):
        part.reshape(-1)[data.draw(st.integers(0, part.size - 1))] += data.draw(st.sampled_from([0.5, 1e-12]))
    vecs = block_of(whole, part)
    if vecs is not None:
        idx = np.ix_(*[np.arange(s) if v is None else v for v, s in zip(vecs, shape)])
        assert np.array_equal(whole[idx], part)
    elif np.array_equal(whole[tuple(slice(o, o + p) for o, p in zip(offs, part_shape))], part):
        raise AssertionError("an exact block was not found")
