"""Collective rules and numerics against the c10d semantics, computed with torch over the
members' local tensors (a process group cannot run inside one test process; the semantics
are the documented ones: reduce elementwise, gather/scatter along dim 0 in group order)."""
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.algebra.terms import TermStore
from shardproof.ops.registry import REGISTRY, RuleCtx

from . import draws
from .core import Claims, Draw, close, examples, local_inputs, magnitude, to_np, tolerance
from .ops import COLLECTIVES

SETTINGS = settings(max_examples=examples(20), deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                    phases=[Phase.explicit, Phase.reuse, Phase.generate])
C = COLLECTIVES
REDUCE = {"sum": lambda s: s.sum(0), "avg": lambda s: s.mean(0), "max": lambda s: s.amax(0),
          "min": lambda s: s.amin(0)}


def _all_reduce(xs, op, group):
    return [REDUCE[op](torch.stack(xs))] * len(xs)


def _all_gather(xs, n, group):
    return [torch.cat(xs, 0)] * len(xs)


def _reduce_scatter(xs, op, n, group):
    return list(REDUCE[op](torch.stack(xs)).chunk(n, 0))


def _all_to_all(xs, out_splits, in_splits, group):
    n = len(xs)
    pieces = [x.chunk(n, 0) for x in xs]
    return [torch.cat([pieces[j][i] for j in range(n)], 0) for i in range(n)]


def _broadcast(xs, src, group):
    return [xs[list(group).index(src)]] * len(xs)


SEMANTICS = {
    "all_reduce": (_all_reduce, lambda d, n, g: (d.draw(st.sampled_from(sorted(REDUCE))), g)),
    "all_gather_into_tensor": (_all_gather, lambda d, n, g: (n, g)),
    "reduce_scatter_tensor": (_reduce_scatter, lambda d, n, g: (d.draw(st.sampled_from(sorted(REDUCE))), n, g)),
    "all_to_all_single": (_all_to_all, lambda d, n, g: (None, None, g)),
    "broadcast": (_broadcast, lambda d, n, g: (d.draw(st.sampled_from(list(g))), g)),
}


def test_every_collective_has_semantics():
    declared = {n[len(C):] for n in REGISTRY if n.startswith(C)}
    assert declared - {"wait_tensor"} <= set(SEMANTICS), declared - set(SEMANTICS)


@pytest.mark.parametrize("name", sorted(SEMANTICS))
def test_collective_rule_and_numerics(name):
    semantics, extra = SEMANTICS[name]
    opdef = REGISTRY[C + name]

    @SETTINGS
    @given(st.data())
    def run(data):
        world = data.draw(st.integers(2, 4))
        size = data.draw(st.integers(2, world)) if name != "broadcast" else world
        group = tuple(sorted(data.draw(st.permutations(range(world)))[:size]))
        n = len(group)
        draws.MODE["rule"] = True
        try:
            rows = n * data.draw(st.integers(1, 2))  # dim 0 divisible by the group (scatter, all_to_all)
            x = draws.tensor(data.draw, (rows,) + draws.shape(data.draw, 0, 2), dts=(draws.F64,))
            lay = draws.layout(data.draw, x, n)
        finally:
            draws.MODE["rule"] = False
        args = extra(data, n, group)
        d = Draw(C + name, {"x": x}, ())
        terms = TermStore()
        try:
            seq_vals, ranks = local_inputs(d, {"x": lay}, n, terms, seed=data.draw(st.integers(0, 99)))
        except Exception:
            return
        locals_ = [tens["x"] for tens, _ in ranks]
        if name in ("all_gather_into_tensor",) or any(t.shape != locals_[0].shape for t in locals_):
            if name != "all_gather_into_tensor" or len({t.shape[1:] for t in locals_}) > 1:
                return  # members' buffers must agree in shape (a mismatch is a collective-mismatch)
        if name in ("reduce_scatter_tensor", "all_to_all_single") and locals_[0].shape[0] % n:
            return
        expected = semantics(locals_, *args)
        # numerics vs the semantics
        got = opdef.numerics([to_np(t) for t in locals_], *args)
        for g, e in zip(got, expected):
            assert close(g, to_np(e), 1e-9), f"{name} numerics disagree with the c10d semantics"
        # rule claims vs the values
        claims = Claims(terms, tolerance([torch.float64], magnitude([to_np(x)]), x.numel()) * (n + 1))
        claims.add(seq_vals["x"], to_np(x), "input")
        for r, (tens, vals) in enumerate(ranks):
            claims.add(vals["x"], to_np(tens["x"]), f"member {r} input")
        try:
            outs = opdef.rule(RuleCtx(terms, None, 0, n), [v["x"] for _, v in ranks], *args)
        except Exception:  # no rule for this form: unknown, no claim
            return
        for r, (v, e) in enumerate(zip(outs, expected)):
            claims.add(v, to_np(e), f"member {r} output ({lay}, {args})")
    run()
