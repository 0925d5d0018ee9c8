"""Ops without a rule, decomposed at capture by torch's own core-ATen decomposition table
(``torch._decomp.core_aten_decompositions``): an op the registry declares is kept as it is;
one it does not is traced through torch's decomposition into ops that may have rules
(``addcmul`` into mul and add, ``hardswish`` into add, clamp, mul and div, ...)."""
from __future__ import annotations

import functools

from ..ops.registry import REGISTRY, load_builtin


@functools.lru_cache(maxsize=1)
def _core_aten() -> tuple:
    """torch's core-ATen table, built once (building it walks every op: ~0.3 s a trace)."""
    from torch._decomp import core_aten_decompositions
    return tuple(core_aten_decompositions().items())


def capture_decompositions() -> dict:
    """{OpOverload: decomposition} for the aten ops the registry has no rule for."""
    import torch
    load_builtin()
    table = {}
    for op, fn in _core_aten():
        if isinstance(op, torch._ops.OpOverload) and op.namespace == "aten" and f"aten.{op._opname}" not in REGISTRY:
            table[op] = fn
    from ..ops.complex_ops import complex_conj, complex_mul
    table[torch.ops.aten.mul.Tensor] = complex_mul  # complex operands only (NotImplemented otherwise)
    table[torch.ops.aten._conj.default] = complex_conj
    return table
