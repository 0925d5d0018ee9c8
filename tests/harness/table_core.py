"""Harness entries: the core-ATen ops of ops/aten_core.py."""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from .core import Draw, T
from .draws import BOOL, F32, F64, FLOATS, I64, NUMERIC, tensor
from .table import A, entry
from .table_misc import _distinct
from .table_views import _ids

KINDS = {"acos": "unit", "asin": "unit", "atanh": "unit", "acosh": "positive", "asinh": "any", "atan": "any",
         "cosh": "unit", "sinh": "unit", "tan": "unit", "log10": "positive", "log2": "positive"}


@entry(*[A + n for n in KINDS])
def unary(draw, op):
    x = tensor(draw, dts=FLOATS, kind=KINDS[op[5:]])
    return Draw(op, {"x": x + 1 if op.endswith("acosh") else x}, (T("x"),))


@entry(A + "elu", A + "hardtanh", A + "leaky_relu")
def activations(draw, op):
    x = tensor(draw, dts=(F64, F32))
    params = {"elu": (1.0, 1.0, 1.0), "hardtanh": (-0.5, 2.0), "leaky_relu": (0.1,)}[op[5:]]
    return Draw(op, {"x": x}, (T("x"),) + (params if draw(st.booleans()) else ()))


@entry(A + "atan2", A + "logical_xor")
def binary(draw, op):
    a = tensor(draw, dts=(F64, F32) if op.endswith("atan2") else (BOOL, F64, I64))
    b = tensor(draw, a.shape, dts=(a.dtype,))
    return Draw(op, {"a": a, "b": b}, (T("a"), T("b")))


@entry(A + "fill")
def fill(draw, op):
    x = tensor(draw, dts=NUMERIC)
    return Draw(op, {"x": x}, (T("x"), draw(st.sampled_from([0, 2, -1]))))


@entry(A + "any")
def any_(draw, op):
    x = tensor(draw, dts=(BOOL, F64, I64))
    if draw(st.booleans()):
        return Draw(op, {"x": x}, (T("x"),))
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(-x.dim(), x.dim() - 1)), draw(st.booleans())))


@entry(A + "sort")
def sort(draw, op):
    x = _distinct(tensor(draw, dts=(F64, F32), views=False))
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(-x.dim(), x.dim() - 1)), draw(st.booleans())))


@entry(A + "scatter", A + "scatter_add", A + "scatter_reduce")
def scatter(draw, op):
    x = tensor(draw, dts=(F64,), min_dims=1)
    d = draw(st.integers(0, x.dim() - 1))
    if x.shape[d] == 0:
        return Draw(op, {"x": x}, (T("x"), d, torch.zeros(x.shape, dtype=torch.int64), x.clone()))
    idx = _ids(draw, tuple(x.shape), x.shape[d])
    src = tensor(draw, x.shape, dts=(F64,))
    others = [i for i in range(x.dim()) if i != d]
    shard = {"x": others, "idx": others, "src": others}
    if op.endswith("scatter_reduce"):
        return Draw(op, {"x": x, "idx": idx, "src": src}, (T("x"), d, T("idx"), T("src"),
                                                           draw(st.sampled_from(["sum", "prod", "amax", "mean"]))),
                    {"include_self": draw(st.booleans())}, shard=shard)
    if op.endswith("scatter") and draw(st.booleans()):
        return Draw(op, {"x": x, "idx": idx}, (T("x"), d, T("idx"), 2.5), shard={"x": others, "idx": others})
    return Draw(op, {"x": x, "idx": idx, "src": src}, (T("x"), d, T("idx"), T("src")), shard=shard)


@entry(*[f"{A}{k}_pad{n}d" for k in ("reflection", "replication") for n in (1, 2, 3)])
def pad(draw, op):
    n = int(op[-2])
    lead = draw(st.integers(1, 2))
    x = tensor(draw, [draw(st.integers(1, 3)) for _ in range(lead)] + [draw(st.integers(3, 4)) for _ in range(n)],
               dts=(F64, F32))
    return Draw(op, {"x": x}, (T("x"), [draw(st.integers(0, 2)) for _ in range(2 * n)]))


@entry(A + "nonzero")
def nonzero(draw, op):
    return Draw(op, {"x": tensor(draw, dts=(F64, I64, BOOL))}, (T("x"),))
