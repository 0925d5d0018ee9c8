"""Dtype conversions: casts and rounding, declared once each.

A cast keeps the value only where the target dtype represents every value of the source:
bool -> anything, int -> a wider int, int -> float, float -> float (a float's rounding to
another float precision is the engine's stated convention: "dtype casts preserve value",
a precision difference being a warning). Those casts are the identity. Every other cast
changes values -- float -> int truncates toward zero, anything -> bool is ``!= 0``, a
narrowing int cast wraps -- and is a new term ``cast[dtype](x)``: an elementwise,
non-linear function, so it commutes with layouts (slices, shards, concatenation,
replication) but not with sums, partials or scaling. ``round``/``floor``/``ceil``/``trunc``/
``frac`` are elementwise non-linear terms the same way.

The numerics do the real conversion (numpy ``astype``, which on this platform agrees with
torch's: truncation toward zero, wrap-around, bool = nonzero); floats stay float64 (the
engine's reference precision).
"""
from __future__ import annotations

import numpy as np

from ..algebra import compute
from ..algebra import layout
from ..algebra.layout import Val, shape_of
from ..algebra.masks import negated
from ..algebra.terms import COMMUTATIVE
from .common import as_float, elementwise_op, elementwise_shape, template, tensor_args
from .registry import RuleCtx, declare

NUMPY_INT = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8}
INT_RANGE = {k: (int(np.iinfo(v).min), int(np.iinfo(v).max)) for k, v in NUMPY_INT.items()}
FLOATS = ("f16", "bf16", "f32", "f64")
BOOL = "b8"
# the float formats that hold every value of each float format (bf16 and f16 hold each other's neither)
WIDER_FLOATS = {"f16": ("f16", "f32", "f64"), "bf16": ("bf16", "f32", "f64"), "f32": ("f32", "f64"), "f64": ("f64",)}


def round_bf16(x) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest, ties to even), as float64."""
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    bits = a.view(np.uint32)
    rounded = ((bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(a), a, rounded).astype(np.float64)


def _kind(dtype) -> str | None:
    if dtype == BOOL:
        return "b"
    if dtype in NUMPY_INT:
        return "i"
    if dtype in FLOATS:
        return "f"
    return None


def preserves(src, dst) -> bool:
    """Whether casting `src` to `dst` keeps every value (under the float-precision convention)."""
    if src == dst or dst is None:
        return True
    s, d = _kind(src), _kind(dst)
    if s is None or d is None:
        return False
    if s == "b":
        return True
    if d == "f":  # a float holds every value of a narrower float; int -> f32/f64: the engine's convention
        return dst in WIDER_FLOATS[src] if s == "f" else dst in ("f32", "f64")
    if s == "i" and d == "i":  # every value of src fits dst
        return INT_RANGE[dst][0] <= INT_RANGE[src][0] and INT_RANGE[src][1] <= INT_RANGE[dst][1]
    return False  # float -> int, anything -> bool (other than bool)


def _dtype_of(value):
    """The IR dtype of a node's value (its type) or None."""
    ty = getattr(value, "type", None)
    return getattr(ty, "dtype", None)


def convert(x, dtype):
    """The value of ``x.to(dtype)`` as torch computes it (floats kept at float64)."""
    x = np.asarray(x)
    if dtype is None:
        return x
    if isinstance(dtype, np.ndarray):  # type_as: the other tensor's kind
        dtype = BOOL if dtype.dtype == bool else "i64" if dtype.dtype.kind in "iu" else "f64"
    if dtype == BOOL:
        return x != 0
    if dtype in NUMPY_INT:
        with np.errstate(invalid="ignore"):
            return x.astype(NUMPY_INT[dtype])
    if dtype == "bf16":
        return round_bf16(x)
    if dtype == "f16":
        with np.errstate(over="ignore"):
            return as_float(x).astype(np.float16).astype(np.float64)
    return as_float(x)


def _cast(ctx: RuleCtx, x: Val, src_node) -> Val:
    """`x` (the value of `src_node`) converted to the dtype of the node's output."""
    src, dst = _dtype_of(src_node), _dtype_of(ctx.node) or ctx.node.kwargs.get("dtype")
    if dst is None or (src is None and _kind(dst) == "f") or (src is not None and preserves(src, dst)):
        return x  # no conversion, or one the precision convention covers; an unknown source: the term
    return compute.elementwise(ctx.terms, "cast", (dst,), [x])


def cast_rule(ctx: RuleCtx, x, *args, **kwargs):
    """Identity where the cast preserves value, else the term ``cast[dtype](x)``."""
    return _cast(ctx, x, ctx.node.args[0]) if isinstance(x, Val) else x


def _out_dtype(node) -> dict:
    """The numerics convert to the dtype the graph records for the output, where it does."""
    return {"out_dtype": _dtype_of(node)}


def _to_num(x, *args, dtype=None, out_dtype=None, **kwargs):
    """aten.to / _to_copy / convert_element_type: the output's recorded dtype, else a
    keyword or the first dtype-like positional (``to(x, dtype)``, ``to(x, device, dtype)``,
    ``to(x, other)``)."""
    dtype = out_dtype or dtype
    if dtype is None:
        for a in args:
            if isinstance(a, np.ndarray) or (isinstance(a, str) and (a in NUMPY_INT or a in FLOATS or a == BOOL)):
                dtype = a
                break
    return convert(x, dtype)


declare(("aten._to_copy", "aten.to", "aten.type_as", "prims.convert_element_type", "aten._to_dtype"),
        numerics=_to_num, rule=cast_rule, shape=lambda x, *a, **k: x, node_kwargs=_out_dtype,
        doc="dtype cast: the identity where the target represents every value, else the term cast[dtype]")


def _copy_rule(ctx: RuleCtx, dst: Val, src, *args, **kwargs):
    """Functional ``dst.copy_(src)``: src broadcast to dst's shape, converted to dst's dtype."""
    if not isinstance(src, Val):
        return src
    return _cast(ctx, layout.expand(ctx.terms, src, shape_of(ctx.terms, dst)), ctx.node.args[1])


def _copy_num(dst, src, *args, out_dtype=None, **kwargs):
    value = np.broadcast_to(src, np.shape(dst))
    return convert(value, out_dtype) if out_dtype else as_float(value)


declare("aten.copy", numerics=_copy_num, rule=_copy_rule, node_kwargs=_out_dtype,
        doc="functional copy_: src broadcast to dst's shape and converted to its dtype")


def _frac(x):
    x = as_float(x)
    with np.errstate(invalid="ignore"):  # frac(inf) is nan, as in torch
        return x - np.trunc(x)


def _rounding(fn):
    def numerics(x, *a, **k):
        x = np.asarray(x)
        if x.dtype.kind != "f" and fn is not np.round:  # an integer is its own floor (its frac is 0)
            return x - x if fn is _frac else x
        return fn(as_float(x), *a, **k)
    return numerics


_ROUNDING = {"round": np.round, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "frac": _frac, "fix": np.trunc}
for _name, _fn in _ROUNDING.items():
    elementwise_op("aten." + _name, _rounding(_fn), doc=f"elementwise {_name} (non-linear: a rounding)")


# ------------------------------------------------------------------ bitwise ops: logical on bool only

def _as_int(x):
    """An integer tensor's values (the numerics may hold them as float64)."""
    x = np.asarray(x)
    return x if x.dtype.kind in "biu" else x.astype(np.int64)


def _bitwise(name: str, fn, bool_term: str, commutative: bool):
    """On bool tensors the logical op (the term masks use), on integers the bitwise one:
    ``6 & 3 == 2`` where ``logical_and(6, 3)`` is true, so the two must be different terms."""
    def rule(ctx: RuleCtx, *args, **kwargs):
        nodes = [a for a in ctx.node.args if hasattr(a, "type")]
        logical = all(_dtype_of(n) == BOOL for n in nodes) and nodes
        term = bool_term if logical else name
        return compute.elementwise(ctx.terms, term, template(args, kwargs), tensor_args(args), commutative=commutative)
    if commutative:
        COMMUTATIVE.add(name)
    def numerics(*a, out_dtype=None, **k):
        if out_dtype == BOOL:  # bool operands may be held as 0/1 numbers: the logical op, as a bool
            return fn(*[np.asarray(x).astype(bool) if isinstance(x, np.ndarray) else bool(x) for x in a])
        arrays = [_as_int(x) if isinstance(x, np.ndarray) else x for x in a]
        ints = [x.dtype for x in arrays if isinstance(x, np.ndarray) and x.dtype.kind in "iu"]
        # a Python int beside an integer tensor takes the tensor's dtype, wrapping as torch does
        # (uint8 & -1 is x & 255; numpy refuses an out-of-range Python int)
        arrays = [np.asarray(x, dtype=np.int64).astype(ints[0]) if ints and isinstance(x, int) and not isinstance(x, bool)
                  else x for x in arrays]
        return fn(*arrays)
    declare("aten." + name, numerics=numerics, rule=rule, shape=elementwise_shape, node_kwargs=_out_dtype,
            doc=f"{name}: logical on bool, bitwise on integers")


_COMPARISONS = {"aten." + c for c in ("lt", "le", "gt", "ge", "eq", "ne")}
_CONNECTIVES = {"aten." + c for c in ("bitwise_and", "bitwise_or", "bitwise_not", "logical_and", "logical_or",
                                      "logical_not")}


def _nan_free_test(node, depth: int = 0) -> bool:
    """Whether a boolean node is and/or/not over comparisons of integer or boolean values
    only (none can be NaN, so ``not (x < c)`` is ``x >= c`` exactly)."""
    if depth > 32 or not hasattr(node, "op"):
        return False
    tensors = [a for a in node.args if hasattr(a, "type")]
    if node.op in _COMPARISONS:
        return all(str(_dtype_of(a))[:1] in ("i", "u", "b") for a in tensors)
    return node.op in _CONNECTIVES and bool(tensors) and all(_nan_free_test(a, depth + 1) for a in tensors)


def _not_rule(ctx: RuleCtx, x, *args, **kwargs):
    """Negation of a boolean: in negation normal form (De Morgan, complements) when the test
    it negates compares only values that cannot be NaN; on integers bitwise (``~6 == -7``)."""
    arg = ctx.node.args[0] if ctx.node is not None and ctx.node.args else None
    if _dtype_of(arg) != BOOL:  # logical_not of a number is ``x == 0``, bitwise_not its complement bits
        term = "logical_not" if ctx.node.op == "aten.logical_not" else "bitwise_not"
        return compute.elementwise(ctx.terms, term, template((x,) + args, kwargs), [x])
    if _nan_free_test(arg):
        return Val(negated(ctx.terms, x.t), x.vecs)
    return compute.elementwise(ctx.terms, "logical_not", template((x,) + args, kwargs), [x])


declare("aten.bitwise_not", numerics=lambda x, *a, out_dtype=None, **k: np.invert(
            np.asarray(x).astype(bool) if out_dtype == BOOL else _as_int(x)),
        rule=_not_rule, shape=elementwise_shape, node_kwargs=_out_dtype, doc="bitwise_not: logical on bool, bitwise on integers")
declare("aten.logical_not", numerics=lambda x, *a, **k: np.logical_not(x), rule=_not_rule, shape=elementwise_shape,
        doc="logical not")
_bitwise("bitwise_and", np.bitwise_and, "and", True)
_bitwise("bitwise_or", np.bitwise_or, "or", True)
_bitwise("bitwise_xor", np.bitwise_xor, "xor", True)
