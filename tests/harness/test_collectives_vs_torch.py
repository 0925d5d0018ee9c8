"""Collective rules and numerics against the c10d semantics, computed with torch over the
members' local tensors (a process group cannot run inside one test process; the semantics
are the documented ones: reduce elementwise, gather/scatter along dim 0 in group order)."""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.algebra import layout
from shardproof.algebra.layout import full
from shardproof.algebra.terms import TermStore
from shardproof.ir.graph import Node
from shardproof.ops.registry import REGISTRY, ArgsMismatch, RuleCtx

from . import draws
from .core import Claims, Draw, close, examples, local_inputs, magnitude, to_np, tolerance
from .ops import COLLECTIVES

SETTINGS = settings(max_examples=examples(20), deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                    phases=[Phase.explicit, Phase.reuse, Phase.generate])
C = COLLECTIVES
REDUCE = {"sum": lambda s: s.sum(0), "avg": lambda s: s.mean(0), "max": lambda s: s.amax(0),
          "min": lambda s: s.amin(0)}


# semantics(xs, member_args) -> each member's output (None: undefined by the backend); member_args[i]
# are member i's arguments after its tensor (the group last), as each rank's program passes them

def _all_reduce(xs, args):
    return [REDUCE[args[0][0]](torch.stack(xs))] * len(xs)


def _all_gather(xs, args):
    return [torch.cat(xs, 0)] * len(xs)


def _reduce_scatter(xs, args):
    return list(REDUCE[args[0][0]](torch.stack(xs)).chunk(len(xs), 0))


def _all_to_all(xs, args):
    """Member j sends rows in_splits[j][i] (in order) to member i (even blocks without splits)."""
    n = len(xs)
    ins = [a[1] if a[1] is not None else [x.shape[0] // n] * n for x, a in zip(xs, args)]
    pieces = [list(x.split(list(s), 0)) for x, s in zip(xs, ins)]
    return [torch.cat([pieces[j][i] for j in range(n)], 0) for i in range(n)]


def _broadcast(xs, args):
    return [xs[args[0][0]]] * len(xs)  # a group rank


def _reduce(xs, args):
    op, dst = args[0][0], args[0][1]
    return [REDUCE[op](torch.stack(xs)) if i == dst else None for i in range(len(xs))]


def _gather(xs, args):
    dst = args[0][1]
    return [torch.stack(xs) if i == dst else None for i in range(len(xs))]


def _splits(d, rows, n):
    cuts = sorted(d.draw(st.lists(st.integers(0, rows), min_size=n - 1, max_size=n - 1)))
    return [b - a for a, b in zip([0] + cuts, cuts + [rows])]


def _a2a_args(d, n, g, xs):
    """Per-member split sizes (MoE routing): member j's input splits drawn from its own rows,
    member i's output splits what the others send it; or no splits (even blocks)."""
    if all(x.shape[0] % n == 0 for x in xs) and d.draw(st.booleans()):
        return [(None, None, g)] * n
    ins = [_splits(d, x.shape[0], n) for x in xs]
    return [([ins[j][i] for j in range(n)], ins[i], g) for i in range(n)]


def _same(extra):
    return lambda d, n, g, xs: [extra(d, n, g)] * n


SEMANTICS = {
    "all_reduce": (_all_reduce, _same(lambda d, n, g: (d.draw(st.sampled_from(sorted(REDUCE))), g))),
    "all_gather_into_tensor": (_all_gather, _same(lambda d, n, g: (n, g))),
    "reduce_scatter_tensor": (_reduce_scatter, _same(lambda d, n, g: (d.draw(st.sampled_from(sorted(REDUCE))), n, g))),
    "all_to_all_single": (_all_to_all, _a2a_args),
    "broadcast": (_broadcast, _same(lambda d, n, g: (d.draw(st.integers(0, n - 1)), g))),
    "reduce": (_reduce, _same(lambda d, n, g: (d.draw(st.sampled_from(sorted(REDUCE))), d.draw(st.integers(0, n - 1)), g))),
    "gather": (_gather, _same(lambda d, n, g: (n, d.draw(st.integers(0, n - 1)), g))),
}
ROOTED = "shardproof_c10d."


def _op(name):
    return (ROOTED if name in ("reduce", "gather", "scatter") else C) + name


def test_every_collective_has_semantics():
    declared = {n.split(".", 1)[1] for n in REGISTRY if n.startswith((C, ROOTED))}
    assert declared - {"wait_tensor", "scatter"} <= set(SEMANTICS), declared - set(SEMANTICS)  # scatter: its own test


def _matched(opdef, xs, member_args):
    """The arguments the rule and numerics receive: what the op's `match` makes of every
    member's call (lockstep's pairing), else the one call all members make."""
    if opdef.match is not None:
        return tuple(opdef.match([(x,) + tuple(a) for x, a in zip(xs, member_args)]))
    assert len({repr(a) for a in member_args}) == 1
    return tuple(member_args[0])


@pytest.mark.parametrize("name", sorted(SEMANTICS))
def test_collective_rule_and_numerics(name):
    semantics, extra = SEMANTICS[name]
    opdef = REGISTRY[_op(name)]

    @SETTINGS
    @given(st.data())
    def run(data):
        world = data.draw(st.integers(2, 4))
        size = data.draw(st.integers(2, world))
        group = tuple(sorted(data.draw(st.permutations(range(world)))[:size]))
        n = len(group)
        draws.MODE["rule"] = True
        try:
            rows = n * data.draw(st.integers(1, 2))  # dim 0 divisible by the group (scatter, all_to_all)
            x = draws.tensor(data.draw, (rows,) + draws.shape(data.draw, 0, 2), dts=(draws.F64,))
            lay = draws.layout(data.draw, x, n)
        finally:
            draws.MODE["rule"] = False
        d = Draw(_op(name), {"x": x}, ())
        terms = TermStore()
        try:
            seq_vals, ranks = local_inputs(d, {"x": lay}, n, terms, seed=data.draw(st.integers(0, 99)))
        except Exception:
            return
        locals_ = [tens["x"] for tens, _ in ranks]
        if name in ("all_gather_into_tensor", "all_to_all_single") or any(t.shape != locals_[0].shape for t in locals_):
            if name not in ("all_gather_into_tensor", "all_to_all_single") or len({t.shape[1:] for t in locals_}) > 1:
                return  # members' buffers must agree in shape (a mismatch is a collective-mismatch)
        if name == "reduce_scatter_tensor" and locals_[0].shape[0] % n:
            return
        member_args = extra(data, n, group, locals_)
        expected = semantics(locals_, member_args)
        args = _matched(opdef, locals_, member_args)
        # numerics vs the semantics
        got = opdef.numerics([to_np(t) for t in locals_], *args)
        assert len(got) == n
        for g, e in zip(got, expected):
            if e is not None:
                assert close(g, to_np(e), 1e-9), f"{name} numerics disagree with the c10d semantics ({member_args})"
        # rule claims vs the values
        claims = Claims(terms, tolerance([torch.float64], magnitude([to_np(x)]), x.numel()) * (n + 1))
        claims.add(seq_vals["x"], to_np(x), "input")
        for r, (tens, vals) in enumerate(ranks):
            claims.add(vals["x"], to_np(tens["x"]), f"member {r} input")
        try:
            outs = opdef.rule(RuleCtx(terms, Node(name, _op(name)), 0, n), [v["x"] for _, v in ranks], *args)
        except Exception:  # no rule for this form: unknown, no claim
            return
        assert len(outs) == n
        for r, (v, e) in enumerate(zip(outs, expected)):
            if e is not None:
                claims.add(v, to_np(e), f"member {r} output ({lay}, {member_args})")
    run()


@SETTINGS
@given(st.data())
def test_scatter_rule_and_numerics(data):
    """Group rank i receives piece i of the root (the others pass no pieces): the root's
    pieces are blocks of x, every member's buffer one block's shape."""
    world = data.draw(st.integers(2, 4))
    group = tuple(sorted(data.draw(st.permutations(range(world)))[:data.draw(st.integers(2, world))]))
    n = len(group)
    k = data.draw(st.integers(0, 2))
    x = draws.values(data.draw, (n * k,) + draws.shape(data.draw, 0, 2), draws.F64)
    src = data.draw(st.integers(0, n - 1))
    terms = TermStore()
    xv = full(terms, terms.make("input", ("x", "f64"), (), tuple(x.shape)))
    blocks = list(x.split(k, 0)) if k else [x[:0]] * n
    pieces_v = [layout.slice_(terms, xv, 0, i * k, (i + 1) * k) for i in range(n)]
    bufs_v = [full(terms, terms.make("input", (f"buf{i}", "f64"), (), tuple(blocks[0].shape))) for i in range(n)]
    opdef = REGISTRY[ROOTED + "scatter"]
    member_args = [((pieces_v if i == src else []), src, group) for i in range(n)]
    args = _matched(opdef, bufs_v, member_args)
    outs = opdef.rule(RuleCtx(terms, Node("scatter", ROOTED + "scatter"), 0, n), bufs_v, *args)
    claims = Claims(terms, 1e-9)
    claims.add(xv, to_np(x), "input")
    for i, v in enumerate(outs):
        claims.add(v, to_np(blocks[i]), f"member {i} output")
    np_args = ([([to_np(b) for b in blocks] if i == src else []) for i in range(n)], src, group)
    got = opdef.numerics([np.zeros(tuple(blocks[0].shape)) for _ in range(n)], *np_args)
    for g, e in zip(got, blocks):
        assert close(g, to_np(e), 0.0)
    with pytest.raises(ArgsMismatch):  # members naming different roots do not pair up
        opdef.match([(b,) + tuple(a) for b, a in zip(bufs_v, [(a[0], (a[1] + 1) % n if i == 0 else a[1], a[2])
                                                                for i, a in enumerate(member_args)])])


def test_all_to_all_splits_must_pair_up():
    """Regression: member j's input split for member i must equal member i's output split
    for member j (the match refuses the call otherwise: a collective mismatch)."""
    opdef = REGISTRY[C + "all_to_all_single"]
    x = [np.zeros((3, 2)), np.zeros((3, 2))]
    ok = [([1, 2], [1, 2], (0, 1)), ([2, 1], [2, 1], (0, 1))]  # 0 sends 2 rows to 1, which expects 2 from 0
    assert _matched(opdef, x, ok)[0] == [[1, 2], [2, 1]]
    with pytest.raises(ArgsMismatch):
        _matched(opdef, x, [([1, 2], [1, 2], (0, 1)), ([1, 2], [2, 1], (0, 1))])
