"""Harness entries: ops along dims (ops/aten_misc.py) and the reductions of ops/aten_reductions.py."""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from .core import Draw, T
from .draws import F32, F64, FLOATS, I64, NUMERIC, tensor
from .table import A, entry
from .table_views import _ids


def _dim(draw, x):
    return draw(st.integers(-x.dim(), x.dim() - 1))


def _distinct(x):
    """Distinct values: the index of an extreme is unique."""
    return x + torch.arange(x.numel()).reshape(x.shape).to(x.dtype) * 1e-3


@entry(A + "cumsum")
def cumsum(draw, op):
    x = tensor(draw, dts=(F64, F32, I64))
    return Draw(op, {"x": x}, (T("x"), _dim(draw, x)))


@entry(A + "flip")
def flip(draw, op):
    x = tensor(draw, dts=NUMERIC)
    dims = sorted(set(draw(st.lists(st.integers(0, x.dim() - 1), min_size=1, max_size=x.dim()))))
    return Draw(op, {"x": x}, (T("x"), dims))


@entry(A + "roll")
def roll(draw, op):
    x = tensor(draw, dts=NUMERIC)
    if draw(st.booleans()):
        return Draw(op, {"x": x}, (T("x"), [draw(st.integers(-3, 3))]))
    dims = draw(st.lists(st.integers(-x.dim(), x.dim() - 1), min_size=1, max_size=2))
    return Draw(op, {"x": x}, (T("x"), [draw(st.integers(-3, 3)) for _ in dims], dims))


@entry(A + "topk")
def topk(draw, op):
    x = _distinct(tensor(draw, dts=(F64, F32), min_dims=1, views=False))
    dim = _dim(draw, x)
    k = draw(st.integers(0, x.shape[dim]))
    return Draw(op, {"x": x}, (T("x"), k, dim, draw(st.booleans())))


@entry(A + "constant_pad_nd")
def constant_pad(draw, op):
    x = tensor(draw, dts=NUMERIC)
    n = draw(st.integers(1, x.dim()))
    pad = [draw(st.integers(0, 2)) for _ in range(2 * n)]
    return Draw(op, {"x": x}, (T("x"), pad, draw(st.sampled_from([0, 1, -2]))))


@entry(A + "index_add")
def index_add(draw, op):
    x = tensor(draw, dts=(F64, I64), min_dims=1)
    d = draw(st.integers(0, x.dim() - 1))
    if x.shape[d] == 0:
        return Draw(op, {"x": x}, (T("x"), 0, torch.zeros(0, dtype=torch.int64), x.new_zeros(x.shape)))
    idx = _ids(draw, (draw(st.integers(1, 3)),), x.shape[d])
    shp = list(x.shape)
    shp[d] = len(idx)
    src = tensor(draw, shp, dts=(x.dtype,))
    others = [i for i in range(x.dim()) if i != d]
    return Draw(op, {"x": x, "idx": idx, "src": src}, (T("x"), d, T("idx"), T("src")),
                {"alpha": draw(st.sampled_from([1, 2]))}, shard={"x": others, "src": others, "idx": [0]})


@entry(A + "softplus")
def softplus(draw, op):
    return Draw(op, {"x": tensor(draw, dts=FLOATS)}, (T("x"), draw(st.sampled_from([1, 2])), 20))


@entry(A + "bernoulli")
def bernoulli(draw, op):
    """Only the deterministic draws (probabilities 0 and 1): the draws are random in torch."""
    x = tensor(draw, dts=(F64, F32)).abs().clamp(max=1).round()
    if draw(st.booleans()):
        return Draw(op, {"x": x}, (T("x"), float(draw(st.sampled_from([0, 1])))))
    return Draw(op, {"x": x}, (T("x"),))


@entry(A + "min")
def min_(draw, op):
    x = _distinct(tensor(draw, dts=(F64, F32), kind="any", views=False))
    if draw(st.booleans()):
        return Draw(op, {"x": x}, (T("x"),), empty_ok=False)
    return Draw(op, {"x": x}, (T("x"), _dim(draw, x), draw(st.booleans())), empty_ok=False)


@entry(A + "argmin")
def argmin(draw, op):
    x = _distinct(tensor(draw, dts=(F64, F32), views=False))
    return Draw(op, {"x": x}, (T("x"), _dim(draw, x), draw(st.booleans())), empty_ok=False)


def _reduce_dims(draw, x):
    return sorted(set(draw(st.lists(st.integers(0, x.dim() - 1), min_size=1, max_size=x.dim()))))


@entry(A + "prod")
def prod(draw, op):
    x = tensor(draw, dts=(F64, I64))
    if draw(st.booleans()):
        return Draw(op, {"x": x}, (T("x"),))
    return Draw(op, {"x": x}, (T("x"), _dim(draw, x), draw(st.booleans())))


@entry(A + "std")
def std(draw, op):
    x = tensor(draw, dts=(F64, F32))
    return Draw(op, {"x": x}, (T("x"), _reduce_dims(draw, x)),
                {"correction": draw(st.sampled_from([0, 1])), "keepdim": draw(st.booleans())})


@entry(A + "logsumexp")
def logsumexp(draw, op):
    x = tensor(draw, dts=(F64, F32))
    return Draw(op, {"x": x}, (T("x"), _reduce_dims(draw, x), draw(st.booleans())))


@entry(A + "linalg_vector_norm")
def vector_norm(draw, op):
    x = tensor(draw, dts=(F64, F32))
    return Draw(op, {"x": x}, (T("x"), draw(st.sampled_from([2, 1, float("inf")])), _reduce_dims(draw, x),
                                draw(st.booleans())))


@entry(A + "mse_loss")
def mse_loss(draw, op):
    a = tensor(draw, dts=(F64,))
    b = tensor(draw, a.shape, dts=(F64,))
    return Draw(op, {"a": a, "b": b}, (T("a"), T("b"), draw(st.sampled_from([0, 1, 2]))))


@entry(A + "clamp_min", A + "clamp_max")
def clamp_side(draw, op):
    return Draw(op, {"x": tensor(draw, dts=NUMERIC)}, (T("x"), draw(st.sampled_from([-1, 0, 2]))))


@entry(A + "rand", A + "randn", A + "randperm")
def random_creation(draw, op):
    """Random draws: the harness compares shapes only (torch's values are random)."""
    if op.endswith("randperm"):
        return Draw(op, {}, (draw(st.integers(0, 6)),), values=False)
    size = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
    return Draw(op, {}, (size,), {"dtype": draw(st.sampled_from([torch.float32, torch.float64]))}, values=False)
