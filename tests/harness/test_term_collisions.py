"""Different ops on the same inputs may build the same term only when torch gives the same
values: one term store, one claim table, every op of a family applied to shared inputs
(the check that logical_and and bitwise_and are not one term on integers)."""
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.algebra.layout import full
from shardproof.algebra.terms import TermStore

from . import draws
from .core import Claims, Draw, T, _pairs, apply_rule, examples, run_torch, to_np
from .table import BINARY, UNARY

SETTINGS = settings(max_examples=examples(15), deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                    phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."


def _claim_all(inputs: dict, calls: list) -> None:
    terms = TermStore()
    vals = {k: full(terms, terms.make("input", (k, str(v.dtype)), (), tuple(v.shape))) for k, v in inputs.items()}
    claims = Claims(terms, 1e-9)
    for k, v in inputs.items():
        claims.add(vals[k], to_np(v), f"input {k}")
    for op, args, kwargs in calls:
        d = Draw(op, inputs, args, kwargs)
        try:
            out = run_torch(d, inputs, args, kwargs)
        except Exception:
            continue  # torch does not take these dtypes
        try:
            got = apply_rule(d, terms, vals, inputs, args, kwargs, out, 0, 1)
        except Exception:
            continue
        for i, (v, o) in enumerate(_pairs(got, out)):
            claims.add(v, to_np(o), f"{op}{args[1:]} output {i}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.bool])
def test_binary_ops_share_terms_only_when_torch_agrees(dtype):
    @SETTINGS
    @given(st.data())
    def run(data):
        shp = draws.shape(data.draw)
        a, b = (draws.values(data.draw, shp, dtype, "small") for _ in range(2))
        calls = [(A + n, (T("a"), T("b")), {}) for n in BINARY] + \
                [(A + n, (T("a"),), {}) for n in UNARY] + \
                [(A + n, (T("a"),), {}) for n in ("logical_not", "bitwise_not")] + \
                [(A + n, (T("a"), c), {}) for n in ("add", "mul", "sub", "eq", "bitwise_and", "bitwise_or", "div",
                                                   "remainder", "floor_divide", "pow") for c in (1, 2, 3)]
        _claim_all({"a": a, "b": b}, calls)
    run()


def test_fills_share_terms_only_when_torch_agrees():
    x = torch.zeros(3, dtype=torch.int64)
    calls = [(A + "full", ([3], v), {"dtype": dt}) for v in (0, 1, 1.5, -2.5, 2)
             for dt in (torch.int64, torch.float64, torch.bool)]
    calls += [(A + "full_like", (T("x"), v), {}) for v in (1.5, 1)]
    _claim_all({"x": x}, calls)


def test_reductions_and_views_share_terms_only_when_torch_agrees():
    @SETTINGS
    @given(st.data())
    def run(data):
        shp = draws.shape(data.draw, min_dims=2)
        x = draws.values(data.draw, shp, torch.float64, "small")
        nd = len(shp)
        calls = []
        for d in range(nd):
            for kd in (False, True):
                calls += [(A + n, (T("x"), [d], kd), {}) for n in ("sum", "mean", "amax", "amin")]
                calls.append((A + "var", (T("x"), [d]), {"correction": 0, "keepdim": kd}))
                calls.append((A + "var", (T("x"), [d]), {"correction": 1, "keepdim": kd}))
            calls += [(A + n, (T("x"), d), {}) for n in ("softmax", "log_softmax", "unsqueeze")]
            calls += [(A + "select", (T("x"), d, 0), {}), (A + "slice", (T("x"), d, 0, 1), {}),
                      (A + "narrow", (T("x"), d, 0, 1), {})]
        calls += [(A + "reshape", (T("x"), [-1]), {}), (A + "permute", (T("x"), list(range(nd))[::-1]), {}),
                  (A + "transpose", (T("x"), 0, 1), {}), (A + "tril", (T("x"),), {}), (A + "triu", (T("x"),), {}),
                  (A + "triu", (T("x"), 1), {}), (A + "sum", (T("x"),), {}), (A + "mean", (T("x"), list(range(nd))), {})]
        _claim_all({"x": x}, calls)
    run()
