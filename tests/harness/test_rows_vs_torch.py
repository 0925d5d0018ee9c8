"""Soundness of the row rules (algebra/picks.py) and of the operand alignments of compute.py
(offsets over dims of different extents, a selection already built), torch the judge: chains
that spell one row-wise computation in two row orders (megatron's [s, b] and the single
device's [b, s]), with the max shift, picks, log-sum-exp and a softmax viewed back; operands
of different extents combined; on drawn sharded layouts, every claimed term holds torch's value
(against the other claims of it and against its own value on the inputs, term_values.py; the
mutants of test_rows_mutants.py must fail this check)."""
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from . import draws
from .core import T, examples
from .test_chains_vs_torch import run_drawn_chain

SETTINGS = settings(max_examples=examples(40), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."


def two_order_steps(s: int, b: int, v: int) -> list:
    """One row-wise computation over ``x [s, b, v]`` and ``labels [b, s]`` spelled in two row
    orders (megatron's [s, b], the single device's [b, s]): max shift, picks, sums over every
    pick, log-sum-exp, a softmax viewed back, [s*b, v] rows picked against [b, s] labels."""
    return [(A + "amax", lambda _: ((T("x"), [-1], True), {})),                      # s0
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
    run_drawn_chain(data.draw, {"x": x, "labels": labels}, two_order_steps(s, b, v))


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


def test_gqa_backward_numerics_are_torchs():
    """ops/sdpa_gqa_backward.py's numpy form (k/v repeated per query head, gradients summed per
    group) against torch's own backward of ``scaled_dot_product_attention(enable_gqa=True)``."""
    import numpy as np
    from shardproof.ops.aten_attention import _sdpa_backward_num
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 2, 5, 3, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(2))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    go = torch.randn(out.shape, dtype=torch.float64, generator=g)
    want = torch.autograd.grad(out, (q, k, v), go)
    got = _sdpa_backward_num(go.numpy(), q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), None, None,
                             0.0, True)
    for w, x in zip(want, got):
        np.testing.assert_allclose(x, w.numpy(), rtol=1e-10, atol=1e-10)


@SETTINGS
@given(st.data())
def test_clamped_embedding_gradient(data):
    """A vocab block's gradient written clamp-and-mask (ops/embedding_clamped.py) against the
    whole table's: every term both share holds torch's values."""
    draws.MODE["rule"] = True
    try:
        vocab, block = 8, data.draw(st.sampled_from([4, 8]))
        lo = data.draw(st.sampled_from([0, vocab - block]))
        ids = torch.tensor(data.draw(st.lists(st.integers(0, vocab - 1), min_size=6, max_size=6))).reshape(2, 3)
        grad = draws.tensor(data.draw, (2, 3, 4), dts=(draws.F64,))
    finally:
        draws.MODE["rule"] = False
    steps = [(A + "ge", lambda _: ((T("ids"), lo), {})),                                   # s0
             (A + "lt", lambda _: ((T("ids"), lo + block), {})),                           # s1
             (A + "bitwise_and", lambda _: ((T("s0"), T("s1")), {})),                      # s2 inside
             (A + "unsqueeze", lambda _: ((T("s2"), -1), {})),                             # s3
             (A + "mul", lambda _: ((T("grad"), T("s3")), {})),                            # s4 g * inside
             (A + "sub", lambda _: ((T("ids"), lo), {})),                                  # s5
             (A + "clamp", lambda _: ((T("s5"), 0, block - 1), {})),                       # s6
             (A + "embedding_dense_backward", lambda _: ((T("s4"), T("s6"), block, -1, False), {})),  # s7
             (A + "embedding_dense_backward", lambda _: ((T("grad"), T("ids"), vocab, -1, False), {})),  # s8
             (A + "slice", lambda _: ((T("s8"), 0, lo, lo + block), {})),                  # s9
             (A + "sub", lambda _: ((T("s7"), T("s9")), {}))]                              # s10
    run_drawn_chain(data.draw, {"ids": ids, "grad": grad}, steps)
