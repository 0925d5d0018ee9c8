"""Every claim an aten op's relation rule makes holds on the values torch computes."""
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from . import draws
import torch

from shardproof.relations.spec import Shard, Slices

from .core import Draw, T, Unknown, check_rule, examples
from .ops import ENTRIES, XFAIL_RULES, declared

SETTINGS = settings(max_examples=examples(15), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])


def _params(xfails):
    return [pytest.param(op, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=xfails[op])) if op in xfails else op
            for op in declared() if op in ENTRIES]


@pytest.mark.parametrize("op", _params(XFAIL_RULES))
def test_rule_claims_hold_on_torch_values(op):
    fn, name = ENTRIES[op]

    @SETTINGS
    @given(st.data())
    def run(data):
        draws.MODE["rule"] = True
        try:
            d = fn(data.draw, name)
            world = data.draw(st.integers(2, 4))
            lays = draws.layouts(data.draw, d.inputs, world, d.shard)
            check_rule(d, lays, world, seed=data.draw(st.integers(0, 1000)))
        except Unknown:
            return  # no claim: nothing to check
        finally:
            draws.MODE["rule"] = False
    run()


# ---------------------------------------------------------------- regressions (issue 14 class 4, fixed on the casts branch)

def test_selection_of_an_extent_one_dim():
    """A rank that selects none of a dim of extent 1 holds an empty tensor (not extent 1)."""
    x = torch.arange(3.0, dtype=torch.float64).reshape(1, 3)
    assert check_rule(Draw("aten.exp", {"x": x}, (T("x"),)), {"x": Shard(0)}, 2) == "checked"  # rank 1 holds no row


def test_zero_against_one_broadcast():
    """Extents 0 and 1 broadcast to 0, as in torch."""
    a = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    b = a + 1
    lays = {"a": Slices(0, {0: (0, 1), 1: (1, 2)}), "b": Slices(0, {0: (0, 0), 1: (2, 2)})}
    check_rule(Draw("aten.mul", {"a": a, "b": b}, (T("a"), T("b"))), lays, 2)  # (1, 3) * (0, 3): no claim fails


def test_the_harness_catches_a_wrong_rule(monkeypatch):
    """A rule that claims too much (neg as the identity) fails the claim check."""
    from shardproof.ops.registry import REGISTRY
    monkeypatch.setattr(REGISTRY["aten.neg"], "rule", lambda ctx, x: x)
    x = torch.arange(1.0, 7.0, dtype=torch.float64).reshape(2, 3)
    with pytest.raises(AssertionError, match="claims term"):
        check_rule(Draw("aten.neg", {"x": x}, (T("x"),)), {"x": Shard(0)}, 2)


def test_the_harness_catches_a_wrong_partial_completion(monkeypatch):
    """A reduction claimed whole on a rank that holds part of the reduced dim fails."""
    from shardproof.algebra.layout import full
    from shardproof.ops.registry import REGISTRY
    real = REGISTRY["aten.sum"].rule

    def whole(ctx, x, *a, **k):  # forget the selection: claim the full sum on every rank
        return real(ctx, full(ctx.terms, x.t), *a, **k)
    monkeypatch.setattr(REGISTRY["aten.sum"], "rule", whole)
    x = torch.arange(1.0, 7.0, dtype=torch.float64).reshape(2, 3)
    with pytest.raises(AssertionError):
        check_rule(Draw("aten.sum", {"x": x}, (T("x"), [0])), {"x": Shard(0)}, 2)


def test_a_fill_holds_its_value_in_its_dtype():
    """torch.full((2,), 1.5, dtype=int64) holds 1: it must not be the float fill's term."""
    d_int = Draw("aten.full", {}, ([2], 1.5), {"dtype": torch.int64})
    d_float = Draw("aten.full", {}, ([2], 1.5), {"dtype": torch.float64})
    from shardproof.algebra.terms import TermStore
    from .core import apply_rule, run_torch
    terms = TermStore()
    vals = [apply_rule(d, terms, {}, {}, d.args, d.kwargs, run_torch(d, {}, d.args, d.kwargs), 0, 1)
            for d in (d_int, d_float)]
    assert vals[0].t != vals[1].t
    assert check_rule(d_int, {}, 2) == "checked"


def test_layer_norm_backward_with_every_dim_normalized():
    """No row dims: grad_weight is g * xhat itself (aten.sum's empty dim list would sum all)."""
    from shardproof.relations.spec import Replicate
    x = torch.arange(8.0, dtype=torch.float64).reshape(2, 4) ** 1.5
    w, b, g = x + 1, x - 1, x.flip(0)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [2, 4], w, b, 1e-5)
    d = Draw("aten.native_layer_norm_backward", {"g": g, "x": x, "mean": mean, "rstd": rstd, "w": w, "b": b},
             (T("g"), T("x"), [2, 4], T("mean"), T("rstd"), T("w"), T("b"), [True, True, True]))
    assert check_rule(d, {k: Replicate() for k in d.inputs}, 2) == "checked"


@pytest.mark.parametrize("args, kwargs", [
    ((T("a"), 0.5), {}),                            # a - c is affine: Σ_r (a_r - c) = a - N·c
    ((T("a"), 2.0), {"rounding_mode": "trunc"}),    # a rounded division is not linear
])
def test_partial_sums_do_not_pass_through_affine_terms(args, kwargs):
    from shardproof.relations.spec import Partial
    op = "aten.sub" if "rounding_mode" not in kwargs else "aten.div"
    a = torch.arange(1.0, 7.0, dtype=torch.float64).reshape(2, 3) * 1.25
    assert check_rule(Draw(op, {"a": a}, args, kwargs), {"a": Partial("sum")}, 3) == "unknown"


def test_matmul_batch_dims_that_broadcast_locally_make_no_claim():
    """Regression (found by the harness): a rank holding one of three batch rows of `a`
    against all three of `b` -- torch broadcasts the 1 to 3; the rule claimed the batched
    product of shape (3, 1, 5, 4). Now no claim (unknown)."""
    from shardproof.relations.spec import Replicate
    a = torch.arange(3 * 3 * 5 * 4, dtype=torch.float64).reshape(3, 3, 5, 4)
    b = torch.arange(3 * 3 * 4 * 4, dtype=torch.float64).reshape(3, 3, 4, 4) % 7
    lays = {"a": Slices(1, {0: (0, 1), 1: (1, 3)}), "b": Replicate()}
    with pytest.raises(Unknown, match="broadcast"):
        check_rule(Draw("aten.matmul", {"a": a, "b": b}, (T("a"), T("b"))), lays, 2)
    assert check_rule(Draw("aten.matmul", {"a": a, "b": b}, (T("a"), T("b"))), {"a": Shard(1), "b": Shard(1)}, 3) == "checked"
