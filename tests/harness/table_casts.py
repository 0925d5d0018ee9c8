"""Harness entries: dtype casts, roundings, bitwise ops, copy into another dtype, as_strided
views of strided bases.

Casts run over every (source, target) pair of bool, int8, uint8, int32, int64, float16,
bfloat16, float32 and float64, on values that truncate (fractions), wrap (ints beyond the
target's range), overflow f16 (beyond 65504) and round in bf16/f16. The source dtypes are
drawn directly (not through ``draws.dtype``): a cast's terms are exact, so the rule check
stays sharp on every dtype.
"""
from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from . import draws
from .core import Draw, T
from .draws import BF16, BOOL, F32, F64, I64, strided
from .table import A, entry

F16, I8, U8, I32 = torch.float16, torch.int8, torch.uint8, torch.int32
CAST_DTYPES = (BOOL, I8, U8, I32, I64, F16, BF16, F32, F64)
INTS = (I8, U8, I32, I64)


def cast_values(draw, shp, dt) -> torch.Tensor:
    """Values that a cast changes: fractions (truncation), halves (ties), ints beyond 8 bits
    (wrap-around), floats beyond f16's range (overflow to inf), fine fractions (bf16 rounding)."""
    g = np.random.default_rng(draw(st.integers(0, 2 ** 31 - 1)))
    n = int(np.prod(shp)) if len(shp) else 1
    if dt == BOOL:
        return torch.from_numpy(g.integers(0, 2, size=shp).astype(bool))
    if dt in INTS:
        info = torch.iinfo(dt)
        lo, hi = max(info.min, -70000), min(info.max, 70000)
        pool = np.concatenate([g.integers(-9, 10, n), g.integers(lo, hi + 1, n), [0, 1, -1, 127, 128, -129, 255, 256]])
        vals = g.choice(pool, n)
        return torch.from_numpy(np.clip(vals, info.min, info.max).reshape(shp).astype(np.int64)).to(dt)
    style = draw(st.sampled_from(["frac", "wide", "ties"]))
    if style == "frac":
        base = g.standard_normal(n) * 5
    elif style == "ties":
        base = g.integers(-8, 9, n) + 0.5 * g.integers(-1, 2, n)
    else:  # beyond int8/uint8/f16 (and below: fine bits bf16 rounds away)
        base = g.choice([1.0, -1.0], n) * g.choice([0.3, 100.7, 200.49, 1000.25, 65519.0, 65520.0, 7e4, 1.0001], n)
    return torch.from_numpy(base.reshape(shp)).to(dt)


def cast_source(draw, dts=CAST_DTYPES, **shape_kw) -> torch.Tensor:
    x = cast_values(draw, draws.shape(draw, **shape_kw), draw(st.sampled_from(list(dts))))
    return strided(draw, x) if not draws.MODE["rule"] else x


@entry(A + "_to_copy")
def to_copy(draw, op):
    return Draw(op, {"x": cast_source(draw)}, (T("x"),), {"dtype": draw(st.sampled_from(CAST_DTYPES))})


@entry(A + "to")
def to(draw, op):
    return Draw(op, {"x": cast_source(draw)}, (T("x"), draw(st.sampled_from(CAST_DTYPES))))


@entry(A + "_to_dtype")
def to_dtype(draw, op):
    """Not a torch op: the graph name of ``Tensor.to(dtype)`` in some exports (run as ``x.to``)."""
    return Draw(op, {"x": cast_source(draw)}, (T("x"), draw(st.sampled_from(CAST_DTYPES))),
                torch_fn=lambda x, dt: x.to(dt))


@entry(A + "type_as")
def type_as(draw, op):
    x = cast_source(draw)
    o = cast_values(draw, (1,), draw(st.sampled_from(CAST_DTYPES)))
    return Draw(op, {"x": x, "o": o}, (T("x"), T("o")), shard={"x": None, "o": []})


@entry(A + "copy")
def copy(draw, op):
    """Functional ``dst.copy_(src)``: src broadcast to dst's shape, converted to dst's dtype."""
    dst = cast_values(draw, draws.shape(draw), draw(st.sampled_from(CAST_DTYPES)))
    src = cast_values(draw, dst.shape if draw(st.booleans()) else tuple(1 for _ in dst.shape),
                      draw(st.sampled_from(CAST_DTYPES)))
    return Draw(op, {"dst": dst, "src": src}, (T("dst"), T("src")))


ROUNDINGS = ("round", "floor", "ceil", "trunc", "frac", "fix")


@entry(*[A + n for n in ROUNDINGS])
def rounding(draw, op):
    ints = () if op.endswith(("frac", "round")) else (I64, I32)  # frac/round: torch has no integer kernel on CPU
    x = cast_source(draw, dts=(F64, F32, BF16, F16) + ints)
    if op.endswith("round") and x.is_floating_point() and draw(st.booleans()):
        return Draw(op, {"x": x}, (T("x"),), {"decimals": draw(st.sampled_from([0, 1, 2, -1]))})
    return Draw(op, {"x": x}, (T("x"),))


@entry(A + "bitwise_not")
def bitwise_not(draw, op):
    return Draw(op, {"x": cast_source(draw, dts=(BOOL,) + INTS)}, (T("x"),))


@entry(A + "bitwise_and", A + "bitwise_or", A + "bitwise_xor")
def bitwise(draw, op):
    a = cast_source(draw, dts=(BOOL,) + INTS)
    if draw(st.booleans()):  # a Python scalar operand
        c = draw(st.sampled_from([True, False])) if a.dtype == BOOL else draw(st.sampled_from([1, 3, 6, -1, 259]))
        return Draw(op, {"a": a}, (T("a"), c))
    shp = tuple(1 if draw(st.booleans()) and draw(st.booleans()) else s for s in a.shape)
    b = cast_values(draw, shp, a.dtype if draw(st.booleans()) else draw(st.sampled_from((BOOL,) + INTS)))
    return Draw(op, {"a": a, "b": b}, (T("a"), T("b")))


# ---------------------------------------------------------------- as_strided of strided bases

@entry(A + "as_strided")
def as_strided(draw, op):
    """A sub-grid of the base's elements read through its storage: the base plain, transposed,
    offset in its buffer or expanded (stride 0); the view's strides are multiples of the
    base's own, its dims possibly permuted, its start an element of the base. On a rank the
    local program reads the same sub-grid of its local (contiguous) tensor. Strided bases in
    the rule check too: the single-device node records the base's strides and offset."""
    x = strided(draw, draws.values(draw, draws.shape(draw, min_dims=1, max_dims=3, min_side=1, max_side=5), F64))
    nd = x.dim()
    steps = [draw(st.sampled_from([1, 1, 2])) for _ in range(nd)]
    starts = [draw(st.integers(0, 2)) for _ in range(nd)]
    perm = draw(st.permutations(range(nd)))
    window = draw(st.booleans()) and nd >= 1
    fixed = (tuple(x.stride()), x.storage_offset())

    def args(s):
        shape = s["x"]
        if tuple(shape) != tuple(x.shape):  # a rank's local tensor (contiguous); a replicated rank's
            # program reads through the base's strides: its own storage, which the rule reads the same way
            strides, off = [int(np.prod(shape[i + 1:])) for i in range(len(shape))], 0
        else:
            strides, off = fixed
        if window and tuple(strides) == tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape))):
            total = int(np.prod(shape))
            lo = min(starts[0], total)
            return (T("x"), [(total - lo) // 2, 2] if (total - lo) % 2 == 0 else [total - lo], [2, 1] if (total - lo) % 2 == 0
                    else [1], off + lo), {}
        size, stride, start = [], [], off
        for d in perm:
            b = min(starts[d], max(shape[d] - 1, 0))
            size.append(max(0, (shape[d] - b + steps[d] - 1) // steps[d]))
            stride.append(strides[d] * steps[d])
            start += b * strides[d]
        if draw_offset_default and start == off:
            return (T("x"), size, stride), {}
        return (T("x"), size, stride, start), {}
    draw_offset_default = draw(st.booleans())
    return Draw(op, {"x": x}, args)
