"""Names in a ``print_readable()`` dump: dotted attribute chains and torch op names."""
from __future__ import annotations

import ast


def dotted_name(expr: ast.AST) -> str | None:
    """``torch.ops.aten.mm.default`` -> that string; None if not a plain dotted name."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


def torch_op_name(dotted: str) -> str | None:
    """``torch.ops.NS.OP[.OVERLOAD]`` -> ``NS.OP``."""
    if not dotted.startswith("torch.ops."):
        return None
    parts = dotted.split(".")[2:]
    return ".".join(parts[:2]) if len(parts) >= 2 else None
