"""The Python of a ``print_readable()`` dump: dotted names, torch op names, class names
that are not Python, the source lines in force (``# File:`` comments), literals."""
from __future__ import annotations

import ast
import re

from ..ir.graph import Source, TensorType

_FILE_RE = re.compile(r"#\s*File:\s*(?P<file>.+?):(?P<line>\d+)(?: in (?P<fn>[^,]+?))?(?:, code: (?P<code>.*))?\s*$")
_CLASS_RE = re.compile(r"^(\s*class\s+)([^\s(:]+)(?=\s*[(:])", re.M)


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


def fix_class_names(text: str) -> str:
    """``class <lambda>(torch.nn.Module):`` is printed by FX but is not Python: rename
    such classes (same line, so line numbers are kept)."""
    def sub(m):
        return m.group(0) if m.group(2).isidentifier() else m.group(1) + "_fx_graph_"
    return _CLASS_RE.sub(sub, text)


def sources(lines: list[str]) -> list[Source | None]:
    """Source in force at each (1-based) line: set by ``# File:`` comments, cleared by blank
    lines and ``# No stacktrace found`` comments."""
    out: list[Source | None] = [None]
    cur = None
    for raw in lines:
        s = raw.strip()
        if not s:
            cur = None
        elif s.startswith("#"):
            m = _FILE_RE.match(s)
            if m:
                cur = Source(m.group("file").strip(), int(m.group("line")), (m.group("fn") or "").strip(),
                             (m.group("code") or "").strip())
            elif s.startswith("# No stacktrace"):
                cur = None
        out.append(cur)
    return out


def assigned_literal(src: Source | None, ann_type):
    """The number a 0-d tensor constant holds when the source line that made it is
    ``x[...] = <number>`` (PyTorch lifts the literal into a constant tensor); else None."""
    if src is None or not src.code or (isinstance(ann_type, TensorType) and ann_type.shape != ()):
        return None
    try:
        st = ast.parse(src.code).body
    except SyntaxError:
        return None
    if len(st) != 1 or not isinstance(st[0], ast.Assign) or len(st[0].targets) != 1 \
            or not isinstance(st[0].targets[0], ast.Subscript):
        return None
    expr, sign = st[0].value, 1
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        expr, sign = expr.operand, (-1 if isinstance(expr.op, ast.USub) else 1)
    if not isinstance(expr, ast.Constant) or isinstance(expr.value, bool) or not isinstance(expr.value, (int, float)):
        return None
    import numpy as np
    return np.asarray(sign * expr.value)
