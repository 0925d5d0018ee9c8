"""Soundness of index_select by an input-free index table (ops/aten_index.py: the table's
values computed exactly, then the op is the selection of those positions), torch the judge:
tables built inside the chain from aranges (repeated, tiled, strided modulo n, flipped, plain) select
from drawn tensors (float64, int64; 1-3 dims; any dim) under drawn sharded layouts; every term
the rules claim must hold torch's value (term_values.py through run_drawn_chain)."""
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from . import draws
from .core import T, examples
from .test_chains_vs_torch import run_drawn_chain

SETTINGS = settings(max_examples=examples(30), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."


def _table_steps(kind: str, n: int, m: int, k: int) -> list:
    """Steps s0.. building an int64 index table into a dim of extent `n` from arange(m) (m <= n)."""
    steps = [(A + "arange", lambda _: ((m,), {"dtype": torch.int64}))]                        # s0
    if kind == "repeated":  # repeat_interleave as torch decomposes it
        steps += [(A + "unsqueeze", lambda _: ((T("s0"), 1), {})),                             # s1
                  (A + "expand", lambda _: ((T("s1"), [m, k]), {})),                           # s2
                  (A + "reshape", lambda _: ((T("s2"), [m * k]), {}))]                         # s3
    elif kind == "tiled":
        steps.append((A + "repeat", lambda _: ((T("s0"), [k]), {})))                           # s1
    elif kind == "strided":
        steps += [(A + "mul", lambda _: ((T("s0"), k), {})),                                   # s1
                  (A + "remainder", lambda _: ((T("s1"), n), {}))]                             # s2
    elif kind == "flipped":
        steps.append((A + "flip", lambda _: ((T("s0"), [0]), {})))                             # s1
    return steps


@SETTINGS
@given(st.data())
def test_index_select_by_an_input_free_table(data):
    draws.MODE["rule"] = True
    try:
        x = draws.tensor(data.draw, dts=(draws.F64, draws.I64))
    finally:
        draws.MODE["rule"] = False
    d = data.draw(st.integers(0, x.dim() - 1))
    n = x.shape[d]
    kind = data.draw(st.sampled_from(["repeated", "tiled", "strided", "flipped", "plain"]))
    m, k = data.draw(st.integers(1, n)), data.draw(st.integers(1, 3))
    steps = _table_steps(kind, n, m, k)
    table = f"s{len(steps) - 1}"
    steps.append((A + "index_select", lambda _: ((T("x"), d, T(table)), {})))
    run_drawn_chain(data.draw, {"x": x}, steps)


def test_the_check_catches_a_rule_that_picks_the_wrong_rows(monkeypatch):
    """Non-vacuous: the same rule reading its table backwards fails the claim check on a
    repeated-rows table (the rule fires on these chains; it is not left opaque)."""
    import numpy as np
    from shardproof.ops import aten_index
    from shardproof.relations.spec import Replicate, Shard
    from .test_chains_vs_torch import run_chain
    real = aten_index.layout.take
    monkeypatch.setattr(aten_index.layout, "take", lambda terms, x, d, table: real(terms, x, d, table[::-1].copy()))
    x = torch.from_numpy(np.arange(12.0).reshape(4, 3))
    steps = _table_steps("repeated", 4, 3, 2) + [(A + "index_select", lambda _: ((T("x"), 0, T("s3")), {}))]
    for lay in (Replicate(), Shard(1)):
        try:
            run_chain({"x": x}, steps, {"x": lay}, 2)
        except AssertionError:
            continue
        raise AssertionError(f"a rule picking the wrong rows went unnoticed ({lay})")
