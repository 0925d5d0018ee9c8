"""Soundness of this stop's layout normal forms, with torch as the judge (every term a rule
builds must hold torch's value on every rank, and an all_reduce of the ranks' outputs must
hold torch's sum):

- a 3-D product folded into rows (view, mm, view) and the same product batched with the
  weight broadcast (unsqueeze, expand, bmm) build one term (algebra/normal.py
  ``_unfolded_product``; ops/pairing.py: a size-1 operand dim is a broadcast; layout.select of
  a size-1 dim drops it);
- partial sums over a grid of blocks (a Mesh of two Shard placements) complete dim by dim
  (algebra/ranks.py ``_complete_by_dims``);
- shapes, split dims, world sizes, grids and the mesh's dim order are drawn (float64: the
  chain harness's tolerance; the rewrites are exact and dtype-blind)."""
import numpy as np
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.relations.spec import Mesh, Replicate, Shard

from .core import T, examples
from .test_chains_vs_torch import run_chain

SETTINGS = settings(max_examples=examples(40), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."


def _fold_steps(b: int, s: int, o: int) -> list:
    """s2: x folded into rows and back; s5: x batched against w broadcast; s6: their difference."""
    return [
        (A + "reshape", lambda sh: ((T("x"), [sh["x"][0] * sh["x"][1], sh["x"][2]]), {})),
        (A + "mm", lambda sh: ((T("s0"), T("w")), {})),
        (A + "reshape", lambda sh: ((T("s1"), [sh["x"][0], sh["x"][1], o]), {})),
        (A + "unsqueeze", lambda sh: ((T("w"), 0), {})),
        (A + "expand", lambda sh: ((T("s3"), [sh["x"][0], sh["w"][0], o]), {})),
        (A + "bmm", lambda sh: ((T("x"), T("s4")), {})),
        (A + "sub", lambda sh: ((T("s2"), T("s5")), {})),
        (A + "sum", lambda sh: ((T("s6"),), {})),
    ]


@settings(SETTINGS)
@given(st.data())
def test_folded_and_batched_products_are_one_term_torch_agrees(data):
    draw = data.draw
    world = draw(st.sampled_from([2, 3, 4]))
    b = world * draw(st.integers(1, 2))
    s = world * draw(st.integers(1, 3))
    h, o = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    dtype = torch.float64  # the chain harness judges at float64 tolerance (the rules are exact)
    g = torch.Generator().manual_seed(draw(st.integers(0, 99)))
    x, w = torch.randn(b, s, h, generator=g, dtype=dtype), torch.randn(h, o, generator=g, dtype=dtype)
    split = draw(st.sampled_from([Replicate(), Shard(0), Shard(1)]))
    outcome = run_chain({"x": x, "w": w}, _fold_steps(b, s, o), {"x": split, "w": Replicate()}, world)
    assert outcome in ("checked", "unknown")


def test_the_two_spellings_build_the_same_term():
    """The difference of the two spellings is the zero linear form on every rank (so the
    normal form is reached, not only consistent)."""
    from shardproof.algebra.terms import TermStore
    from .core import Draw, apply_rule, local_inputs, run_torch
    x, w = torch.randn(2, 6, 4, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    terms = TermStore()
    seq, ranks = local_inputs(Draw("fold", {"x": x, "w": w}, ()), {"x": Shard(1), "w": Replicate()}, 2, terms, 0)
    for who, (tens, vals) in enumerate([({"x": x, "w": w}, seq)] + ranks):
        tens, vals = dict(tens), dict(vals)
        for i, (op, build) in enumerate(_fold_steps(2, 6, 3)[:6]):
            args, kwargs = build({k: tuple(v.shape) for k, v in tens.items()})
            d = Draw(op, {"x": x, "w": w}, ())
            out = run_torch(d, tens, args, kwargs)
            got = apply_rule(d, terms, vals, tens, args, kwargs, out, max(who - 1, 0), 1 if who == 0 else 2)
            tens[f"s{i}"], vals[f"s{i}"] = out, (got[0] if isinstance(got, (list, tuple)) else got)
        from shardproof.algebra.layout import same_vec
        assert vals["s2"].t == vals["s5"].t and all(same_vec(a, b) for a, b in zip(vals["s2"].vecs, vals["s5"].vecs))


@settings(SETTINGS)
@given(st.data())
def test_sums_over_a_grid_of_blocks_complete_torch_agrees(data):
    """Each rank sums its (rows x columns) block of x * x; the all_reduce of the ranks' sums
    must be the single device's sum exactly when the blocks tile x (claimed and judged)."""
    draw = data.draw
    grid = draw(st.sampled_from([(2, 2), (2, 3), (3, 2), (2, 1), (1, 2)]))
    world = grid[0] * grid[1]
    rows, cols = grid[0] * draw(st.integers(1, 2)), grid[1] * draw(st.integers(1, 3))
    dims = draw(st.sampled_from([(0, 1), (1, 0)]))
    extra = draw(st.integers(1, 3))
    dtype = torch.float64  # the chain harness judges at float64 tolerance (the rules are exact)
    x = torch.randn(rows, cols, extra, generator=torch.Generator().manual_seed(draw(st.integers(0, 99))), dtype=dtype)
    if dims == (1, 0):  # the mesh splits dim 1 first: the ranks' order is not the row-major grid's
        x = x.transpose(0, 1).contiguous()
    layout = Mesh(grid, (Shard(dims[0]), Shard(dims[1])))
    steps = [(A + "mul", lambda sh: ((T("x"), T("x")), {})), (A + "sum", lambda sh: ((T("s0"),), {}))]
    assert run_chain({"x": x}, steps, {"x": layout}, world) == "checked"


def test_a_grid_with_a_block_counted_twice_is_not_completed():
    """Adversarial: rank 3 holds block (0, 1) again and block (1, 1) is nobody's; the pieces'
    sum is not the whole sum, and the rule must not say it is."""
    from shardproof.algebra.ranks import complete_partials
    from shardproof.algebra.terms import TermStore
    terms = TermStore()
    x = terms.make("input", ("x", "f64"), (), (4, 4))

    def block(r0, c0):
        over = tuple(np.arange(a, a + 2, dtype=np.int64).tobytes() for a in (r0, c0))
        return terms.make("sum", ((0, 1), False, over), (x,), ())
    good = [block(0, 0), block(0, 2), block(2, 0), block(2, 2)]
    whole = complete_partials(terms, good, "sum")
    assert whole is not None and terms[whole].attrs[2] is None  # the sum over all of x
    assert complete_partials(terms, good[:3] + [block(0, 2)], "sum") is None
    assert complete_partials(terms, [block(0, 0), block(0, 2), block(2, 0)], "sum") != whole


def test_a_wrong_unfold_is_not_the_product():
    """Adversarial: rows folded back as (S, B) instead of (B, S) are another tensor of another
    shape; the normal form must only identify the view that undoes the fold."""
    from shardproof.algebra.normal import _unfolded_product
    from shardproof.algebra.terms import TermStore
    terms = TermStore()
    x = terms.make("input", ("x", "f64"), (), (2, 3, 4))
    w = terms.make("input", ("w", "f64"), (), (4, 5))
    flat = terms.make("reshape", ((6, 4),), (x,), (6, 4))
    dot = terms.make("dot", (((), (), (1,), (0,)), None), (flat, w), (6, 5))
    assert _unfolded_product(terms, ((3, 2, 5),), (dot,), (3, 2, 5)) is None
    assert _unfolded_product(terms, ((6, 5, 1),), (dot,), (6, 5, 1)) is None
    assert _unfolded_product(terms, ((2, 3, 5),), (dot,), (2, 3, 5)) is not None
