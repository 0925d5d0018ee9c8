"""The vision rules (ops/aten_vision.py) on the layouts they are for: which shards pass through
(checked: the ranks' outputs relate to the single-device output, every claim holding on torch's
values), which do not (unknown: no claim), and a wrong rule caught."""
import pytest
import torch

from shardproof.relations.spec import Replicate, Shard

from .core import Draw, T, check_rule

A = torch.ops.aten
G = torch.Generator().manual_seed(0)


def _r(*shape):
    return torch.randn(*shape, generator=G, dtype=torch.float64)


X, W, B = _r(4, 6, 5, 5), _r(4, 6, 3, 3), _r(4)
CONV = (T("x"), T("w"), T("b"), [1, 1], [1, 1], [1, 1], False, [0, 0], 1)


@pytest.mark.parametrize("lays, verdict", [
    ({"x": Shard(0), "w": Replicate(), "b": Replicate()}, "checked"),   # data parallel: the batch dim passes
    ({"x": Replicate(), "w": Shard(0), "b": Shard(0)}, "checked"),     # output channels from the weight's rows
    ({"x": Shard(2), "w": Replicate(), "b": Replicate()}, "unknown"),  # a spatial shard: halo rows missing
])
def test_convolution_layouts(lays, verdict):
    assert check_rule(Draw("aten.convolution", {"x": X, "w": W, "b": B}, CONV), lays, 2) == verdict


def test_convolution_over_sharded_input_channels_is_a_partial_sum():
    """Input channels split alike on the input and the weight's dim 1: an all_reduce completes it."""
    d = Draw("aten.convolution", {"x": X, "w": W}, (T("x"), T("w"), None) + CONV[3:])
    assert check_rule(d, {"x": Shard(1), "w": Shard(1)}, 3) == "checked"


def test_convolution_backward_weight_gradient_over_a_batch_shard():
    g = _r(4, 4, 5, 5)
    d = Draw("aten.convolution_backward", {"g": g, "x": X, "w": W},
             (T("g"), T("x"), T("w"), [4]) + CONV[3:] + ([True, True, True],))
    assert check_rule(d, {"g": Shard(0), "x": Shard(0), "w": Replicate()}, 2) == "checked"


@pytest.mark.parametrize("x_lay, verdict", [(Shard(1), "checked"), (Shard(0), "unknown"), (Shard(3), "unknown")])
def test_batch_norm_statistics_span_the_batch(x_lay, verdict):
    """Training batch norm: a channel shard passes; a batch (or spatial) shard relates to nothing
    without all-reduced statistics."""
    c = X.shape[1]
    inputs = {"x": X, "w": _r(c), "b": _r(c), "rm": _r(c), "rv": _r(c).abs() + 0.5}
    d = Draw("aten._native_batch_norm_legit_functional", inputs,
             (T("x"), T("w"), T("b"), T("rm"), T("rv"), True, 0.1, 1e-5))
    lays = {k: Shard(0) if x_lay == Shard(1) else Replicate() for k in inputs if k != "x"}
    assert check_rule(d, {"x": x_lay, **lays}, 2) == verdict


def test_group_norm_is_per_sample():
    d = Draw("aten.native_group_norm", {"x": X, "w": _r(6), "b": _r(6)},
             lambda s: ((T("x"), T("w"), T("b"), s["x"][0], 6, 25, 3, 1e-5), {}))
    assert check_rule(d, {"x": Shard(0), "w": Replicate(), "b": Replicate()}, 2) == "checked"


@pytest.mark.parametrize("dim, verdict", [(0, "checked"), (1, "checked"), (2, "unknown")])
def test_max_pool_passes_batch_and_channels(dim, verdict):
    d = Draw("aten.max_pool2d_with_indices", {"x": X}, (T("x"), [2, 2], [2, 2], [0, 0], [1, 1], False))
    assert check_rule(d, {"x": Shard(dim)}, 2) == verdict


def test_embedding_bag_column_shard():
    w, ids, off = _r(7, 4), torch.tensor([1, 3, 3, 6, 0]), torch.tensor([0, 2])
    d = Draw("aten._embedding_bag", {"w": w, "ids": ids, "off": off}, (T("w"), T("ids"), T("off"), False, 2))
    assert check_rule(d, {"w": Shard(1), "ids": Replicate(), "off": Replicate()}, 2) == "checked"


def test_fft_and_diagonal_pass_the_other_dims():
    x = _r(4, 3, 6)
    assert check_rule(Draw("aten._fft_r2c", {"x": x}, (T("x"), [2], 0, True)), {"x": Shard(0)}, 2) == "checked"
    assert check_rule(Draw("aten.diagonal", {"x": x}, (T("x"), 0, 1, 2)), {"x": Shard(0)}, 2) == "checked"
    assert check_rule(Draw("aten.diagonal", {"x": x}, (T("x"), 0, 0, 1)), {"x": Shard(0)}, 2) == "unknown"
    g = _r(2, 4, 6, 6)
    up = Draw("aten.upsample_bilinear2d_backward", {"g": g},
              lambda s: ((T("g"), [6, 6], list(s["g"][:2]) + [3, 3], False), {}))
    assert check_rule(up, {"g": Shard(1)}, 2) == "checked"  # the input size's channel extent is local


def test_the_harness_catches_a_conv_rule_that_forgets_the_input_channel_shard(monkeypatch):
    from shardproof.algebra.layout import full
    from shardproof.ops.registry import REGISTRY
    real = REGISTRY["aten.convolution"].rule

    def whole(ctx, x, w, *a):  # claim the full sum over input channels on every rank
        return real(ctx, full(ctx.terms, x.t), full(ctx.terms, w.t), *a)
    monkeypatch.setattr(REGISTRY["aten.convolution"], "rule", whole)
    d = Draw("aten.convolution", {"x": X, "w": W}, (T("x"), T("w"), None) + CONV[3:])
    with pytest.raises(AssertionError, match="claims term"):
        check_rule(d, {"x": Shard(1), "w": Shard(1)}, 2)


def test_depthwise_convolution_passes_a_channel_shard():
    """groups = channels, one filter each: every rank passes its own channel count as groups."""
    x, w, b = _r(2, 6, 5, 5), _r(6, 1, 3, 3), _r(6)
    d = Draw("aten.convolution", {"x": x, "w": w, "b": b},
             lambda s: ((T("x"), T("w"), T("b"), [1, 1], [1, 1], [1, 1], False, [0, 0], s["x"][1]), {}))
    assert check_rule(d, {"x": Shard(1), "w": Shard(0), "b": Shard(0)}, 2) == "checked"
    g = _r(2, 6, 5, 5)
    bw = Draw("aten.convolution_backward", {"g": g, "x": x, "w": w},
              lambda s: ((T("g"), T("x"), T("w"), [s["w"][0]], [1, 1], [1, 1], [1, 1], False, [0, 0], s["x"][1],
                          [True, True, True]), {}))
    assert check_rule(bw, {"g": Shard(1), "x": Shard(1), "w": Shard(0)}, 3) == "checked"
    assert check_rule(bw, {"g": Shard(0), "x": Shard(0), "w": Replicate()}, 2) == "checked"  # batch: partial sums


def test_group_norm_backward_over_a_batch_shard():
    """grad_input per sample; grad_weight and grad_bias: partial sums an all_reduce completes."""
    w = _r(6)
    _, mean, rstd = A.native_group_norm(X, w, None, 4, 6, 25, 3, 1e-5)
    inputs = {"g": _r(4, 6, 5, 5), "x": X, "mean": mean, "rstd": rstd, "w": w}
    d = Draw("aten.native_group_norm_backward", inputs,
             lambda s: ((T("g"), T("x"), T("mean"), T("rstd"), T("w"), s["x"][0], 6, 25, 3, [True, True, True]), {}))
    lays = {"g": Shard(0), "x": Shard(0), "mean": Shard(0), "rstd": Shard(0), "w": Replicate()}
    assert check_rule(d, lays, 2) == "checked"
