"""Soundness of the row rules (algebra/picks.py) and of the operand alignments of compute.py
(offsets over dims of different extents, a selection already built), torch the judge: chains
that spell one row-wise computation in two row orders (megatron's [s, b] and the single
device's [b, s]), with the max shift, picks, log-sum-exp and a softmax viewed back; operands
of different extents combined; on drawn sharded layouts, every shared term holds torch's value."""
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from . import draws
from .core import T, examples
from .test_chains_vs_torch import run_drawn_chain

SETTINGS = settings(max_examples=examples(40), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."


@SETTINGS
@given(st.data())
def test_rows_in_two_orders(data):
    draws.MODE["rule"] = True
    try:
        s, b, v = data.draw(st.sampled_from([(3, 2, 5), (2, 2, 4), (4, 1, 3)]))
        x = draws.tensor(data.draw, (s, b, v), dts=(draws.F64,))
        labels = torch.tensor(data.draw(st.lists(st.integers(0, v - 1), min_size=s * b, max_size=s * b))).reshape(b, s)
    finally:
        draws.MODE["rule"] = False
    steps = [(A + "amax", lambda _: ((T("x"), [-1], True), {})),                      # s0
             (A + "sub", lambda _: ((T("x"), T("s0")), {})),                          # s1 max-shifted
             (A + "view", lambda _: ((T("s1"), [s * b, v]), {})),                     # s2 [s*b, v]
             (A + "permute", lambda _: ((T("labels"), [1, 0]), {})),                  # s3
             (A + "reshape", lambda _: ((T("s3"), [s * b, 1]), {})),                  # s4
             (A + "gather", lambda _: ((T("s2"), 1, T("s4")), {})),                   # s5 picks, [s, b] rows
             (A + "permute", lambda _: ((T("x"), [1, 0, 2]), {})),                    # s6 [b, s, v]
             (A + "reshape", lambda _: ((T("s6"), [b * s, v]), {})),                  # s7
             (A + "_log_softmax", lambda _: ((T("s7"), 1, False), {})),               # s8
             (A + "reshape", lambda _: ((T("labels"), [b * s, 1]), {})),              # s9
             (A + "gather", lambda _: ((T("s8"), 1, T("s9")), {})),                   # s10 picks, [b, s] rows
             (A + "sum", lambda _: ((T("s5"),), {})),                                 # s11
             (A + "sum", lambda _: ((T("s10"),), {})),                                # s12
             (A + "logsumexp", lambda _: ((T("s7"), [1]), {})),                       # s13
             (A + "sum", lambda _: ((T("s13"),), {})),                                # s14
             (A + "exp", lambda _: ((T("s8"),), {})),                                 # s15 softmax, [b, s] rows
             (A + "reshape", lambda _: ((T("s15"), [b, s, v]), {})),                  # s16
             (A + "permute", lambda _: ((T("s16"), [1, 0, 2]), {})),                  # s17 back to [s, b]
             (A + "reshape", lambda _: ((T("s17"), [s * b, v]), {})),                 # s18
             (A + "_softmax", lambda _: ((T("s2"), 1, False), {})),                   # s19 the same, in [s, b]
             (A + "sub", lambda _: ((T("s18"), T("s19")), {})),                       # s20
             (A + "reshape", lambda _: ((T("s10"), [b, s]), {})),                     # s21 picks back in [s, b]
             (A + "permute", lambda _: ((T("s21"), [1, 0]), {})),                     # s22
             (A + "reshape", lambda _: ((T("s22"), [s * b, 1]), {})),                 # s23
             (A + "view", lambda _: ((T("x"), [s * b, v]), {})),                      # s24 [s*b, v] rows ...
             (A + "_log_softmax", lambda _: ((T("s24"), 1, False), {})),              # s25
             (A + "gather", lambda _: ((T("s25"), 1, T("s9")), {}))]                  # s26 ... against [b, s] labels
    run_drawn_chain(data.draw, {"x": x, "labels": labels}, steps)


@SETTINGS
@given(st.data())
def test_operands_of_different_extents(data):
    """A half of a wider tensor against a narrower one, and an expanded (repeated) selection
    against a plain one."""
    draws.MODE["rule"] = True
    try:
        n = data.draw(st.sampled_from([4, 6]))
        a = draws.tensor(data.draw, (3, n), dts=(draws.F64,))
        w = draws.tensor(data.draw, (3, 2 * n), dts=(draws.F64,))
        h = draws.tensor(data.draw, (n // 2, 3), dts=(draws.F64,))
        y = draws.tensor(data.draw, (n, 3), dts=(draws.F64,))
    finally:
        draws.MODE["rule"] = False
    rep = torch.arange(n // 2).repeat_interleave(2)
    steps = [(A + "slice", lambda _: ((T("w"), 1, n, 2 * n), {})),                   # s0 the second half
             (A + "mul", lambda _: ((T("a"), T("s0")), {})),                          # s1
             (A + "index_select", lambda _: ((T("h"), 0, rep), {})),                  # s2 repeated rows
             (A + "mul", lambda _: ((T("s2"), T("y")), {})),                          # s3
             (A + "unsqueeze", lambda _: ((T("s2"), 0), {})),                         # s4
             (A + "unsqueeze", lambda _: ((T("y"), 0), {})),                          # s5
             (A + "permute", lambda _: ((T("s5"), [0, 2, 1]), {})),                   # s6
             (A + "bmm", lambda _: ((T("s4"), T("s6")), {}))]                         # s7
    run_drawn_chain(data.draw, {"a": a, "w": w, "h": h, "y": y}, steps)
