"""Harness entries: the ops of ops/attention_merge.py (ring / flash attention merges)."""
from __future__ import annotations

from .core import Draw, T
from .draws import F32, F64, tensor
from .table import A, _bcast_shape, entry


@entry(A + "logaddexp")
def logaddexp(draw, op):
    a = tensor(draw, dts=(F64, F32))
    b = tensor(draw, _bcast_shape(draw, a.shape), dts=(a.dtype,))
    return Draw(op, {"a": a, "b": b}, (T("a"), T("b")))
