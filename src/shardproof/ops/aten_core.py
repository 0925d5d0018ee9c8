"""Core-ATen ops (``torch.Tag.core``) that ordinary models rarely write but the opset holds:
more elementwise functions, sort, any, fill, scatters and the non-constant paddings. Each is
declared the same way as the rest: a rule through sharding, torch's kernel as numerics."""
from __future__ import annotations

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val
from ..algebra.terms import freeze
from .aten_misc import along, torch_kernel
from .aten_reductions import reduce_whole
from .common import as_float, elementwise_op, template
from .registry import RuleCtx, declare

T = "aten."

_UNARY = {"acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin, "asinh": np.arcsinh, "atan": np.arctan,
          "atanh": np.arctanh, "cosh": np.cosh, "sinh": np.sinh, "tan": np.tan, "log10": np.log10, "log2": np.log2}
for _name, _fn in _UNARY.items():
    elementwise_op(T + _name, torch_kernel(_name, lambda x, _fn=_fn: _fn(as_float(x))))
for _name in ("elu", "hardtanh", "leaky_relu"):  # parameters (alpha, bounds, slope) become term attributes
    elementwise_op(T + _name, torch_kernel(_name))
elementwise_op(T + "atan2", torch_kernel("atan2", np.arctan2))
elementwise_op(T + "logical_xor", torch_kernel("logical_xor", np.logical_xor), commutative=True)


def _fill_rule(ctx: RuleCtx, x: Val, value):
    return compute.elementwise(ctx.terms, "fill", template((x, value), {}), [x] if isinstance(value, (int, float, bool))
                               else [x, value])


declare(T + "fill", numerics=torch_kernel("fill"), rule=_fill_rule, doc="a tensor of x's shape holding value")


def _any_rule(ctx: RuleCtx, x: Val, dim=None, keepdim=False):
    return reduce_whole(ctx, "any", (), x, dim, keepdim)


declare(T + "any", numerics=torch_kernel("any"), rule=_any_rule, doc="any over dims (over a sharded dim: unknown)")


def _sort_rule(ctx: RuleCtx, x: Val, dim=-1, descending=False, stable=None):
    return along(ctx, "sort", (bool(descending),), x, [dim], n_out=2)


declare(T + "sort", numerics=torch_kernel("sort"), rule=_sort_rule, doc="sort along a dim, values and indices")


def _scatter_rule(op):
    def rule(ctx: RuleCtx, x: Val, dim, index: Val, src, *rest, **kwargs):
        others = [index] + ([src] if isinstance(src, Val) else [])
        attrs = template(((src if not isinstance(src, Val) else "$"),) + rest, kwargs)
        return along(ctx, op, attrs, x, [dim], others=others)
    return rule


for _name in ("scatter", "scatter_add", "scatter_reduce"):
    declare(T + _name, numerics=torch_kernel(_name), rule=_scatter_rule(_name),
            doc=f"{_name} along a dim (index and source beside x: exact on a common selection of the other dims)")


def _pad_rule(op, nd_padded):
    def rule(ctx: RuleCtx, x: Val, pad):
        nd = len(x.vecs)
        return along(ctx, op, (freeze(pad),), x, range(nd - nd_padded, nd))
    return rule


for _kind in ("reflection", "replication"):
    for _n in (1, 2, 3):
        declare(f"{T}{_kind}_pad{_n}d", numerics=torch_kernel(f"{_kind}_pad{_n}d"),
                rule=_pad_rule(f"{_kind}_pad", _n), doc=f"{_kind} padding of the last {_n} dims")


def _whole_rule(op):
    """Ops whose output shape depends on every element (data-dependent sizes): the term of
    the whole input, of the size this run gives."""
    def rule(ctx: RuleCtx, x: Val, *args, **kwargs):
        whole = layout.materialize(ctx.terms, x)
        shape = ctx.out_shapes()[0]
        return Val(ctx.terms.make(op, template(args, kwargs), (whole.t,), shape), (None,) * len(shape))
    return rule


declare(T + "nonzero", numerics=torch_kernel("nonzero"), rule=_whole_rule("nonzero"),
        doc="indices of the nonzero elements (a data-dependent size: needs the whole input)")
