"""Core-ATen ops whose results are data-dependent or symbolic: masked_scatter, _local_scalar_dense,
resize_ and the symbolic size queries (sym_size, sym_numel, sym_stride, sym_storage_offset,
sym_is_contiguous).

* masked_scatter places source elements in the order the mask selects them (in the flat order
  of the whole tensor): a rule over the operands held whole (exact; no selection passes).
* the others give *unknown* with the reason (a declared check), never a crash: a tensor's
  value read as a Python number (``.item()``) steers shapes and control flow; ``resize_``
  reallocates storage (new elements are uninitialized) unless the size is unchanged; symbolic
  sizes come from graphs traced with dynamic shapes. Live capture traces with concrete shapes,
  so these never appear as compute nodes there (a data-dependent ``.item()`` stops the capture
  with its reason, see frontends/torch_capture.py); dumps can hold them."""
from __future__ import annotations

import numpy as np

from ..algebra import layout
from ..algebra.layout import Val
from .aten_misc import torch_kernel
from .common import template
from .registry import RuleCtx, declare

T = "aten."


def _whole(op: str):
    def rule(ctx: RuleCtx, *args, **kwargs):
        vals = [layout.materialize(ctx.terms, a) for a in args if isinstance(a, Val)]
        shape = ctx.node.type.shape
        return Val(ctx.terms.make(op, template(args, kwargs), tuple(v.t for v in vals), shape), (None,) * len(shape))
    return rule


declare(T + "masked_scatter", numerics=torch_kernel("masked_scatter"), rule=_whole("masked_scatter"),
        doc="source elements written where the mask holds, in flat order (needs every operand whole)")


def _never(reason: str):
    def check(node):
        return reason
    return check


def _no_rule(ctx: RuleCtx, *args, **kwargs):
    raise ValueError(f"{ctx.node.op}: no relation rule (see its declared check)")


ITEM = ("reads a tensor's value as a Python number (.item()): later shapes and control flow depend on the "
        "data, which the relations do not follow; keep the value a tensor")
declare(T + "_local_scalar_dense", numerics=lambda x: np.asarray(x).item(), rule=_no_rule, check=_never(ITEM),
        doc="a one-element tensor's value as a Python number (unknown: data-dependent)")


def _resize_check(node):
    x, size = node.args[0], node.args[1]
    if tuple(getattr(getattr(x, "type", None), "shape", ())) == tuple(size):
        return None
    return "resizes storage in place (new elements are uninitialized memory): no relation to any program value"


def _resize_num(x, size, **kwargs):
    x = np.asarray(x)
    if tuple(x.shape) != tuple(size):
        raise NotImplementedError("aten.resize_ to another size: uninitialized memory")
    return x


declare(T + "resize_", numerics=_resize_num, rule=lambda ctx, x, size, **kwargs: x, check=_resize_check,
        doc="resize in place (to its own size: the identity; else unknown, uninitialized memory)")

SYMBOLIC = ("a symbolic size or layout query of a graph traced with dynamic shapes: trace with concrete shapes "
            "(live capture does), or give the sizes with --symbols")
_SYM_NUMERICS = {
    "sym_size": lambda x, dim=None: np.shape(x)[dim] if dim is not None else tuple(np.shape(x)),
    "sym_numel": lambda x: int(np.size(x)),
    "sym_stride": lambda x, dim=None: None,
    "sym_storage_offset": lambda x: None,
    "sym_is_contiguous": lambda x, *a, **k: None,
}
for _name, _num in _SYM_NUMERICS.items():
    declare(T + _name, numerics=_num, rule=_no_rule, check=_never(SYMBOLIC),
            doc=f"{_name}: a symbolic size query (unknown: dynamic shapes)")
