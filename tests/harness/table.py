"""The harness table: one argument generator per declared op, grouped by family.

``ENTRIES[op](draw) -> Draw``. Every op in the registry under a checked namespace must
have an entry (``test_every_op_has_an_entry``): declaring an op means joining the harness.
Generators draw argument *builders* where the arguments depend on the input shapes, so each
rank passes arguments that fit its local tensors, as a real per-rank program would.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from .core import Draw, T
from .draws import BF16, BOOL, F32, F64, FLOATS, I64, NUMERIC, tensor

ENTRIES: dict = {}
A = "aten."


def entry(*names):
    def register(fn):
        for n in names:
            ENTRIES[n] = (fn, n)
        return fn
    return register


def _bcast_shape(draw, shp):
    """A shape that broadcasts against `shp` (dims set to 1, leading dims dropped)."""
    out = [1 if draw(st.booleans()) and draw(st.booleans()) else s for s in shp]
    drop = draw(st.integers(0, len(out) - 1)) if len(out) > 1 and draw(st.booleans()) else 0
    return tuple(out[drop:])


# ---------------------------------------------------------------- elementwise

UNARY = {"exp": "any", "log": "positive", "tanh": "any", "rsqrt": "positive", "sqrt": "positive",
         "sigmoid": "any", "relu": "any", "silu": "any", "sin": "any", "cos": "any", "abs": "any",
         "reciprocal": "positive", "erf": "any", "log1p": "positive", "expm1": "unit", "square": "any",
         "sign": "any", "isinf": "any", "isnan": "any", "neg": "any"}


@entry(*[A + n for n in UNARY])
def unary(draw, op):
    dts = NUMERIC if op[5:] in ("abs", "neg", "square", "sign", "relu", "isinf", "isnan") else FLOATS
    return Draw(op, {"x": tensor(draw, dts=dts, kind=UNARY[op[5:]])}, (T("x"),))


@entry(A + "gelu")
def gelu(draw, op):
    approx = draw(st.sampled_from(["none", "tanh"]))
    return Draw(op, {"x": tensor(draw)}, (T("x"),), {"approximate": approx})


@entry(A + "logical_not", A + "bitwise_not")
def logical_not(draw, op):
    return Draw(op, {"x": tensor(draw, dts=(BOOL, I64) if "bitwise" in op else (BOOL, F64, I64))}, (T("x"),))


BINARY = {"add": NUMERIC, "sub": NUMERIC, "mul": NUMERIC, "div": FLOATS, "pow": FLOATS, "maximum": NUMERIC,
          "minimum": NUMERIC, "eq": NUMERIC, "ne": NUMERIC, "lt": NUMERIC, "le": NUMERIC, "gt": NUMERIC,
          "ge": NUMERIC, "logical_and": (BOOL, F64), "logical_or": (BOOL, F64), "bitwise_and": (BOOL, I64),
          "bitwise_or": (BOOL, I64), "bitwise_xor": (BOOL, I64), "fmod": (F64, F32, I64), "remainder": (F64, F32, I64), "floor_divide": (F64, F32, I64),
          "rsub": (F64, F32, I64)}


# ops whose aten schema takes a Python scalar as the second operand
SCALAR_OK = {"add", "sub", "mul", "div", "pow", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
             "bitwise_xor", "fmod", "remainder", "floor_divide", "rsub"}


@entry(*[A + n for n in BINARY])
def binary(draw, op):
    name = op[5:]
    dts = BINARY[name]
    a = tensor(draw, dts=dts, kind="positive" if name == "pow" else "any")
    kind = "positive" if name in ("div", "fmod", "remainder", "floor_divide", "pow") else "any"
    if name == "pow":
        kind = "small"
    if name in SCALAR_OK and draw(st.booleans()):  # a Python scalar operand
        c = draw(st.sampled_from([2, 3, -1, 0.5])) if a.dtype != BOOL else True
        if name.startswith("bitwise") and a.dtype == I64:
            c = draw(st.sampled_from([1, 3, 6]))
        if name == "rsub":
            return Draw(op, {"a": a}, (T("a"), c))
        return Draw(op, {"a": a}, (T("a"), c))
    b = tensor(draw, _bcast_shape(draw, a.shape), dts=(a.dtype,), kind=kind)
    kwargs = {}
    if name in ("add", "sub") and a.dtype != BOOL and draw(st.booleans()):
        kwargs["alpha"] = draw(st.sampled_from([2, -1]))
    if name == "div" and draw(st.booleans()):
        kwargs["rounding_mode"] = draw(st.sampled_from(["trunc", "floor"]))
    return Draw(op, {"a": a, "b": b}, (T("a"), T("b")), kwargs)


@entry(A + "where")
def where(draw, op):
    x = tensor(draw, dts=NUMERIC)
    c = tensor(draw, _bcast_shape(draw, x.shape), dts=(BOOL,))
    if draw(st.booleans()):
        z = torch.tensor(draw(st.sampled_from([0, -1])), dtype=x.dtype)  # torch.where(m, x, 0): a 0-d operand
        return Draw(op, {"c": c, "x": x, "z": z}, (T("c"), T("x"), T("z")))
    y = tensor(draw, _bcast_shape(draw, x.shape), dts=(x.dtype,))
    return Draw(op, {"c": c, "x": x, "y": y}, (T("c"), T("x"), T("y")))


@entry(A + "masked_fill")
def masked_fill(draw, op):
    x = tensor(draw, dts=NUMERIC)
    m = tensor(draw, _bcast_shape(draw, x.shape), dts=(BOOL,))
    return Draw(op, {"x": x, "m": m}, (T("x"), T("m"), draw(st.sampled_from([0, -1, 3]))))


@entry(A + "clamp")
def clamp(draw, op):
    lo = draw(st.sampled_from([None, -1.0, 0.0]))
    hi = draw(st.sampled_from([None, 2.0] if lo is not None else [2.0]))
    return Draw(op, {"x": tensor(draw, dts=(F64, F32, BF16))}, (T("x"), lo, hi))


def _pair(draw, kind_b="any", dts=FLOATS):
    g = tensor(draw, dts=dts)
    return g, tensor(draw, g.shape, dts=(g.dtype,), kind=kind_b)


@entry(A + "gelu_backward")
def gelu_backward(draw, op):
    g, x = _pair(draw)
    return Draw(op, {"g": g, "x": x}, (T("g"), T("x")), {"approximate": draw(st.sampled_from(["none", "tanh"]))})


@entry(A + "threshold_backward")
def threshold_backward(draw, op):
    g, x = _pair(draw)
    return Draw(op, {"g": g, "x": x}, (T("g"), T("x"), draw(st.sampled_from([0, 0.5]))))


@entry(A + "sigmoid_backward", A + "tanh_backward", A + "silu_backward")
def unary_backward(draw, op):
    g, y = _pair(draw, "unit")
    return Draw(op, {"g": g, "y": y}, (T("g"), T("y")))


@entry(A + "triu", A + "tril")
def triangle(draw, op):
    x = tensor(draw, min_dims=2)
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(-2, 2))), shard={"x": list(range(x.dim() - 2))})


@entry(A + "native_dropout", A + "dropout")
def dropout(draw, op):
    """Only the deterministic cases (p = 0, or not training): the mask is random in torch."""
    x = tensor(draw)
    p, train = draw(st.sampled_from([(0.0, True), (0.5, False), (0.0, False)]))
    return Draw(op, {"x": x}, (T("x"), p, train))


# ---------------------------------------------------------------- copies and casts

@entry(A + "clone", A + "contiguous", A + "alias", A + "detach", A + "lift_fresh_copy")
def copies(draw, op):
    return Draw(op, {"x": tensor(draw, dts=NUMERIC + (BOOL,))}, (T("x"),))


# the casts (_to_copy, to, type_as, _to_dtype), roundings and bitwise ops: table_casts.py


@entry(A + "_assert_tensor_metadata")
def assert_metadata(draw, op):
    x = tensor(draw)
    return Draw(op, {"x": x}, (T("x"),))


@entry(A + "view_as_real")
@entry(A + "view_as_real_copy")
def view_as_real(draw, op):
    """Complex inputs only: torch returns the real and imaginary parts in a new trailing dim
    of 2 (the rule makes no claim: complex tensors have no relation rules yet)."""
    re, im = tensor(draw, dts=(F64,), views=False), None
    im = tensor(draw, re.shape, dts=(F64,), views=False)
    return Draw(op, {"x": torch.complex(re, im)}, (T("x"),))


@entry(A + "view_as_complex")
def view_as_complex(draw, op):
    """A real tensor whose last dim holds (real, imaginary) pairs, contiguous (torch requires a
    last dim of size 2 and stride 1); the rule needs the pair dim whole on a rank."""
    x = tensor(draw, dts=(F64, F32), views=False)
    return Draw(op, {"x": torch.stack([x, -x * 0.5 + 1], dim=-1).contiguous()}, (T("x"),))
