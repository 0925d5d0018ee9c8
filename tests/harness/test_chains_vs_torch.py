"""Rules in sequence: a view of a split tensor, then an op with a second operand, then a
reduction. The layout algebra (reshapes of selections, aligned blocks, offset windows) lives
between ops, so single-op draws do not reach it; every step's claims are checked as in
:func:`core.check_rule`."""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.algebra.terms import TermStore

from . import draws
from .core import (Claims, Draw, T, Unknown, _complete, _map, _pairs, apply_rule, examples,
                   local_inputs, magnitude, run_torch, to_np, tolerance)
from .table_views import _reshaped
from .term_values import check_terms

SETTINGS = settings(max_examples=examples(120), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."


def _refs(args) -> list:
    out = []
    _map(args, lambda p: out.append(p.name))
    return out


def run_chain(inputs: dict, steps: list, layouts: dict, world: int, seed: int = 0) -> str:
    """`steps`: (op, builder(shapes) -> (args, kwargs)); T("s<i>") names step i's output 0."""
    terms = TermStore()
    d0 = Draw("chain", inputs, ())
    seq_vals, ranks = local_inputs(d0, layouts, world, terms, seed)
    envs = [(dict(inputs), dict(seq_vals))] + [(dict(t), dict(v)) for t, v in ranks]
    values = [to_np(t) for t in inputs.values()]
    claims = Claims(terms, tolerance([torch.float64], magnitude(values), 64) * (world + 1))
    for who, (tens, vals) in enumerate(envs):
        for k in inputs:
            claims.add(vals[k], to_np(tens[k]), f"{'single' if who == 0 else f'rank {who - 1}'} input {k}")
    last = None
    try:
        for i, (op, build) in enumerate(steps):
            d = Draw(op, inputs, ())
            outs = []
            for who, (tens, vals) in enumerate(envs):
                args, kwargs = build({k: tuple(v.shape) for k, v in tens.items()})
                try:
                    out = run_torch(d, tens, args, kwargs)
                except Exception as exc:
                    raise Unknown(f"torch rejects step {i}: {exc}") from exc
                got = apply_rule(d, terms, vals, tens, args, kwargs, out, max(who - 1, 0), 1 if who == 0 else world)
                pairs = _pairs(got, out)
                for j, (v, o) in enumerate(pairs):
                    claims.add(v, to_np(o), f"step {i} ({op}) {'single' if who == 0 else f'rank {who - 1}'} output "
                                            f"{j} (layouts {layouts})")
                tens[f"s{i}"], vals[f"s{i}"] = pairs[0][1], pairs[0][0]
                outs.append(pairs)
            last = outs
        related = _complete(terms, claims, last[0], last[1:])
    finally:  # every claimed term against its own value, not only against the other claims of it
        check_terms(claims, {k: to_np(v) for k, v in inputs.items()})
    return "checked" if related else "unknown"


def run_drawn_chain(draw, inputs: dict, steps: list) -> None:
    """:func:`run_chain` on drawn layouts, world size and seed (a chain no rule relates: no claim)."""
    draws.MODE["rule"] = True
    try:
        world = draw(st.integers(2, 4))
        lays = draws.layouts(draw, inputs, world)
        seed = draw(st.integers(0, 99))
    finally:
        draws.MODE["rule"] = False
    _claims_checked(inputs, steps, lays, world, seed)


def _view_step(draw, x, name="x"):
    kind = draw(st.sampled_from(["reshape", "permute", "slice", "unsqueeze", "cat", "expand"]))
    nd = x.dim()
    if kind == "reshape":
        how = (draw(st.sampled_from(["merge", "split", "flatten", "unit"])), draw(st.integers(0, 3)))
        return A + "reshape", lambda s: ((T(name), _reshaped(s[name], how)), {})
    if kind == "permute":
        perm = draw(st.permutations(range(nd)))
        return A + "permute", lambda s: ((T(name), perm), {})
    if kind == "slice":
        d, lo, hi = draw(st.integers(0, nd - 1)), draw(st.integers(0, 2)), draw(st.sampled_from([None, 3, -1]))
        return A + "slice", lambda s: ((T(name), d, lo, hi), {})
    if kind == "unsqueeze":
        d = draw(st.integers(0, nd))
        return A + "unsqueeze", lambda s: ((T(name), d), {})
    if kind == "expand":
        return A + "expand", lambda s: ((T(name), [2] + list(s[name])), {})
    d = draw(st.integers(0, nd - 1))
    return A + "cat", lambda s: (([T(name), T(name)], d), {})


def _renamed(build, old, new):
    """The same builder reading tensor `new` where it read `old`."""
    def run(shapes):
        args, kwargs = build({**shapes, old: shapes[new]})
        swap = lambda p: T(new) if p.name == old else p  # noqa: E731
        return _map(args, swap), _map(kwargs, swap)
    return run


def _out_shape(op, build, x):
    args, kwargs = build({"x": tuple(x.shape)})
    return tuple(run_torch(Draw(op, {"x": x}, ()), {"x": x}, args, kwargs).shape)


@SETTINGS
@given(st.data())
def test_view_then_binary_then_reduce(data):
    draws.MODE["rule"] = True
    try:
        x = draws.tensor(data.draw, dts=(draws.F64,), min_side=2, max_side=4)
        view_op, view = _view_step(data.draw, x)
        try:
            y_shape = _out_shape(view_op, view, x)
        except Exception:
            return
        if not y_shape or 0 in y_shape:
            return
        bin_op = data.draw(st.sampled_from([A + "add", A + "mul", A + "sub", A + "maximum"]))
        if data.draw(st.booleans()):  # both operands through the same view
            z = draws.tensor(data.draw, tuple(x.shape), dts=(draws.F64,))
            steps = [(view_op, view), (view_op, _renamed(view, "x", "z")),
                     (bin_op, lambda s: ((T("s0"), T("s1")), {}))]
        else:
            z = draws.tensor(data.draw, y_shape, dts=(draws.F64,))
            steps = [(view_op, view), (bin_op, lambda s: ((T("s0"), T("z")), {}))]
        out = f"s{len(steps) - 1}"
        if data.draw(st.booleans()):
            rd = data.draw(st.integers(0, len(y_shape) - 1))
            red = data.draw(st.sampled_from([A + "sum", A + "amax", A + "_softmax"]))
            steps.append((red, (lambda s: ((T(out), [rd]), {})) if red != A + "_softmax"
                          else (lambda s: ((T(out), rd, False), {}))))
    finally:
        draws.MODE["rule"] = False
    run_drawn_chain(data.draw, {"x": x, "z": z}, steps)


def _claims_checked(inputs, steps, lays, world, seed) -> None:
    """Run the chain; a rule that makes no claim (unknown) is no failure."""
    try:
        run_chain(inputs, steps, lays, world, seed)
    except Unknown:
        return


def test_chain_harness_catches_a_wrong_claim(monkeypatch):
    """A permute rule that forgets to move the layout fails the chain's claim check."""
    from shardproof.ops.registry import REGISTRY
    from shardproof.relations.spec import Shard
    monkeypatch.setattr(REGISTRY[A + "permute"], "rule", lambda ctx, x, dims: x)
    x = torch.from_numpy(np.arange(12.0).reshape(3, 4))
    z = x.t().contiguous() + 1
    steps = [(A + "permute", lambda s: ((T("x"), [1, 0]), {})), (A + "add", lambda s: ((T("s0"), T("z")), {}))]
    try:
        run_chain({"x": x, "z": z}, steps, {"x": Shard(0), "z": Shard(1)}, 2)
    except AssertionError:
        return
    except Unknown:
        pass
    raise AssertionError("the wrong permute rule went unnoticed")


@pytest.mark.parametrize("world", [2, 3])
def test_expanded_operand_against_a_split_one(world):
    """Regression (issue 14 class 4, fixed on the casts branch): an operand expanded to a
    split operand's local shape -- on 3 ranks one rank holds no row, and expands to (0, 3, 3)."""
    from shardproof.relations.spec import Replicate, Shard
    x = torch.from_numpy(np.arange(9.0).reshape(3, 3))
    z = torch.from_numpy(np.arange(18.0).reshape(2, 3, 3))
    steps = [(A + "expand", lambda s: ((T("x"), list(s["z"])), {})), (A + "sub", lambda s: ((T("s0"), T("z")), {}))]
    assert run_chain({"x": x, "z": z}, steps, {"x": Replicate(), "z": Shard(0)}, world) == "checked"


def _padded_layout(draw, x, d):
    from shardproof.relations.spec import Padded, Shard
    size = x.shape[d]
    repeat = draw(st.integers(1, 2))
    extra = draw(st.integers(0 if repeat > 1 else 1, 3))
    return Padded(Shard(d), d, ((size, size * repeat + extra, repeat),))


@settings(max_examples=examples(40), deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(st.data())
def test_padding_through_ops_then_reduce(data):
    """Zero padding (issue 15) made non-zero by an op (exp(0) = 1, sigmoid(0) = 1/2), then
    combined with a second operand and reduced, over the padded dim or another: every claim
    the padding rewrites make about the padding's own piece is checked on torch's values."""
    draws.MODE["rule"] = True
    try:
        x = draws.tensor(data.draw, dts=(draws.F64,), min_side=2, max_side=4)
        d = data.draw(st.integers(0, x.dim() - 1))
        world = data.draw(st.integers(2, 4))
        lay = _padded_layout(data.draw, x, d)
        z = draws.tensor(data.draw, tuple(x.shape), dts=(draws.F64,))
        unary = data.draw(st.sampled_from([A + "exp", A + "sigmoid", A + "tanh", A + "neg"]))
        binary = data.draw(st.sampled_from([A + "mul", A + "add", A + "sub"]))
        red = data.draw(st.sampled_from([A + "sum", A + "amax"]))
        rd = data.draw(st.sampled_from([d, data.draw(st.integers(0, x.dim() - 1))]))
        steps = [(unary, lambda s: ((T("x"),), {})), (binary, lambda s: ((T("s0"), T("z")), {})),
                 (red, lambda s: ((T("s1"), [rd]), {}))]
        lays = {"x": lay, "z": data.draw(st.sampled_from([lay, _padded_layout(data.draw, x, d)]))}
        seed = data.draw(st.integers(0, 99))
    finally:
        draws.MODE["rule"] = False
    _claims_checked({"x": x, "z": z}, steps, lays, world, seed)


def test_padding_harness_catches_dropped_padding(monkeypatch):
    """A padding rewrite that drops a padding piece that is not zero (exp(0) = 1 summed as if
    it were 0) fails the chain's claim check."""
    from shardproof.algebra import padding
    from shardproof.relations.spec import Padded, Replicate, Shard
    right = padding._reduction

    def wrong(terms, op, attrs, children, shape):
        found = padding.pad_cat(terms, children[0])
        if op == "sum" and found is not None and found[0] in attrs[0] and attrs[2] is None:
            return terms.make(op, attrs, (found[1][0],), shape)
        return right(terms, op, attrs, children, shape)
    monkeypatch.setattr(padding, "_reduction", wrong)
    x = torch.from_numpy(np.arange(6.0).reshape(3, 2) / 10)
    steps = [(A + "exp", lambda s: ((T("x"),), {})), (A + "sum", lambda s: ((T("s0"), [0]), {}))]
    whole = {"x": Padded(Replicate(), 0, ((3, 4),))}  # every rank: x and a row of zeros
    with pytest.raises(AssertionError):
        run_chain({"x": x}, steps, whole, 2)
    monkeypatch.setattr(padding, "_reduction", right)
    assert run_chain({"x": x}, steps, whole, 2) == "unknown"  # exp(0) joined the sum: no claim of x's
    steps[0] = (A + "mul", lambda s: ((T("x"), T("x")), {}))  # 0 * 0 = 0: the padding adds nothing
    assert run_chain({"x": x}, steps, {"x": Padded(Shard(0), 0, ((3, 4),))}, 2) == "checked"
