"""Ops without a rule, decomposed at capture by torch's own core-ATen decomposition table
(``torch._decomp.core_aten_decompositions``): an op the registry declares is kept as it is;
one it does not is traced through torch's decomposition into ops that may have rules
(``addcmul`` into mul and add, ``hardswish`` into add, clamp, mul and div, ...)."""
from __future__ import annotations

from ..ops.registry import REGISTRY, load_builtin


def capture_decompositions() -> dict:
    """{OpOverload: decomposition} for the aten ops the registry has no rule for."""
    import torch
    from torch._decomp import core_aten_decompositions
    load_builtin()
    table = {}
    for op, fn in core_aten_decompositions().items():
        if isinstance(op, torch._ops.OpOverload) and op.namespace == "aten" and f"aten.{op._opname}" not in REGISTRY:
            table[op] = fn
    from ..ops.complex_ops import complex_mul
    table[torch.ops.aten.mul.Tensor] = complex_mul  # complex operands only (NotImplemented otherwise)
    return table
