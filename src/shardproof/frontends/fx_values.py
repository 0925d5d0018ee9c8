"""Values and types of an FX dump's Python: dtypes, annotations, argument expressions, groups.

A mixin of the parser in :mod:`shardproof.frontends.fx_text` (which documents the conventions);
:class:`DumpError` and :func:`read_dump` are the dump readers' error type and reader."""
from __future__ import annotations

import ast
import math
import os
import re


from ..ir.graph import Node, TensorType
from .fx_syntax import dotted_name as _dotted
from .fx_syntax import torch_op_name as _torch_op_name

# torch.<name> dtype attribute -> the short form used in annotations and by torch_capture.DTYPES
TORCH_DTYPES = {
    "float32": "f32", "float": "f32", "float64": "f64", "double": "f64", "float16": "f16", "half": "f16",
    "bfloat16": "bf16", "int64": "i64", "long": "i64", "int32": "i32", "int": "i32", "int16": "i16",
    "short": "i16", "int8": "i8", "uint8": "u8", "bool": "b8",
}
_DROPPED_KWARGS = {"device", "layout", "pin_memory", "memory_format", "non_blocking"}
# collectives whose last positional argument is a process-group name
_GROUP_PREFIXES = ("_c10d_functional.", "_c10d_functional_autograd.")
_GROUP_OPS = {"vllm.all_reduce", "vllm.all_gather", "vllm.reduce_scatter"}
_SCALAR_ANNOTATIONS = {"int", "float", "bool", "str", "None", "SymInt", "SymFloat", "SymBool"}
_PY_NAMES = {"inf": math.inf, "nan": math.nan}
_BINOPS = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
    ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "matmul", ast.BitAnd: "and_", ast.BitOr: "or_",
    ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift",
}
_UNARYOPS = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "invert", ast.Not: "not_"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}

_TYPE_RE = re.compile(r"^\s*(?P<dtype>[A-Za-z_][A-Za-z0-9_]*)\[(?P<shape>[^\[\]]*)\]"
                      r"(?:\[(?P<stride>[^\[\]]*)\])?\s*(?P<device>[A-Za-z_][\w:]*)?\s*$")
# torch.fx's dtype abbreviations: f32, bf16, f8e4m3fn, i64, u8, b8, c64, ...
_DTYPE_RE = re.compile(r"^(?:bf16|[fiucb]\d[0-9a-z_]*)$")
_SYM_RE = re.compile(r"^\s*Sym\((?P<expr>.*)\)\s*$")


class DumpError(Exception):
    """The dump is not a readable FX graph (bad input: exit 3). The message starts with
    ``file:line:``; ``file`` and ``line`` are also attributes."""

    def __init__(self, file: str, line: int | None, message: str):
        self.file, self.line, self.detail = file, line, message
        super().__init__(f"{file}:{line}: {message}" if line is not None else f"{file}: {message}")


def read_dump(path) -> str:
    """A dump file's text; a missing or undecodable file is a :class:`DumpError`."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise DumpError(path, None, f"cannot read: {exc}") from None


class ValueParser:
    """Parse annotations and argument expressions (a mixin: needs ``filename``, ``line``,
    ``symbols``, ``env``, ``groups``, ``rank``, ``world_size``)."""

    # ------------------------------------------------------------ errors
    def err(self, message: str, line: int | None = None) -> DumpError:
        return DumpError(self.filename, self.line if line is None else line, message)

    # ------------------------------------------------------------ types
    def _dim(self, expr: ast.AST, ann: str) -> int:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
            return expr.value
        if isinstance(expr, ast.Name):
            if expr.id in self.symbols:
                return int(self.symbols[expr.id])
            raise self.err(f"symbolic size {expr.id!r} in annotation {ann!r} (a data-dependent size?): give its "
                           f"value with --symbols {expr.id}=<int>, a symbols: section in the relations file, or "
                           f"symbols={{{expr.id!r}: <int>}}")
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
            v = self._dim(expr.operand, ann)
            return -v if isinstance(expr.op, ast.USub) else v
        if isinstance(expr, ast.BinOp) and type(expr.op) in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod):
            a, b = self._dim(expr.left, ann), self._dim(expr.right, ann)
            if isinstance(expr.op, ast.Add):
                return a + b
            if isinstance(expr.op, ast.Sub):
                return a - b
            if isinstance(expr.op, ast.Mult):
                return a * b
            if b == 0:
                raise self.err(f"division by zero in annotation {ann!r}")
            return a // b if isinstance(expr.op, ast.FloorDiv) else a % b
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and not expr.keywords:
            vals = [self._dim(a, ann) for a in expr.args]
            fn = expr.func.id
            if fn in ("Max", "Min") and vals:
                return max(vals) if fn == "Max" else min(vals)
            if fn in ("FloorDiv", "CeilDiv", "Mod") and len(vals) == 2 and vals[1] != 0:
                a, b = vals
                return a // b if fn == "FloorDiv" else (-(-a // b) if fn == "CeilDiv" else a % b)
        raise self.err(f"cannot parse size {ast.unparse(expr)!r} in annotation {ann!r}")

    def parse_type(self, ann_node: ast.AST | None, placeholder: bool = False):
        """Annotation -> TensorType, or None for non-tensors; ("sym", value) for a Sym placeholder."""
        if ann_node is None:
            return None
        if isinstance(ann_node, ast.Constant) and isinstance(ann_node.value, str):
            ann = ann_node.value
        else:
            ann = ast.unparse(ann_node)
        ann_s = ann.strip()
        m = _SYM_RE.match(ann_s)
        if m:
            if not placeholder:
                return None
            try:
                expr = ast.parse(m.group("expr").strip(), mode="eval").body
            except SyntaxError:
                raise self.err(f"cannot parse type annotation {ann!r}") from None
            return ("sym", self._dim(expr, ann))
        if ann_s in _SCALAR_ANNOTATIONS:
            return None
        m = _TYPE_RE.match(ann_s)
        if not m or not _DTYPE_RE.match(m.group("dtype")):
            raise self.err(f"cannot parse type annotation {ann!r}")
        shape_s = m.group("shape").strip()
        if not shape_s:
            return TensorType((), m.group("dtype"))
        try:
            tup = ast.parse(f"({shape_s},)", mode="eval").body
        except SyntaxError:
            raise self.err(f"cannot parse type annotation {ann!r}") from None
        if not isinstance(tup, ast.Tuple):
            raise self.err(f"cannot parse type annotation {ann!r}")
        if m.group("stride") is not None and m.group("stride").strip():
            try:
                ast.parse(f"({m.group('stride')},)", mode="eval")
            except SyntaxError:
                raise self.err(f"cannot parse strides in type annotation {ann!r}") from None
        shape = tuple(self._dim(e, ann) for e in tup.elts)
        if any(d < 0 for d in shape):
            raise self.err(f"negative size in type annotation {ann!r}")
        return TensorType(shape, m.group("dtype"))

    # ------------------------------------------------------------ values


    def value(self, expr: ast.AST):
        """An argument expression -> a Node, a Python literal, or a string."""
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.Name):
            if expr.id in self.env:
                return self.env[expr.id]
            if expr.id in _PY_NAMES:
                return _PY_NAMES[expr.id]
            raise self.err(f"undefined name {expr.id!r}")
        if isinstance(expr, ast.List):
            return [self.value(e) for e in expr.elts]
        if isinstance(expr, ast.Tuple):
            return tuple(self.value(e) for e in expr.elts)
        if isinstance(expr, ast.Dict):
            if any(k is None for k in expr.keys):
                raise self.err(f"unsupported argument {ast.unparse(expr)!r}")
            return {self.value(k): self.value(v) for k, v in zip(expr.keys, expr.values)}
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
            v = self.value(expr.operand)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v if isinstance(expr.op, ast.USub) else v
        if isinstance(expr, ast.BinOp) and type(expr.op) in (ast.Add, ast.Sub, ast.Mult):
            a, b = self.value(expr.left), self.value(expr.right)
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
                return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(expr.op)]
        if isinstance(expr, ast.Attribute):
            dotted = _dotted(expr)
            if dotted is not None:
                if dotted.startswith("torch.ops."):
                    op = _torch_op_name(dotted)
                    if op:
                        return op
                elif dotted.startswith("torch.") and dotted.count(".") == 1:
                    name = dotted.split(".", 1)[1]
                    return TORCH_DTYPES.get(name, dotted)
                elif dotted.startswith("self.") and dotted.count(".") == 1:
                    attr = dotted.split(".", 1)[1]
                    if attr in self.submodules:
                        return dotted
                    if attr in self.env:
                        return self.env[attr]
                    return self.add(Node(attr, "constant", kwargs={"value": None}, source=self.src))
        if isinstance(expr, ast.Call):
            fn = _dotted(expr.func)
            if fn in ("device", "torch.device"):
                return self._device(expr)
            if fn == "float" and len(expr.args) == 1 and not expr.keywords:
                v = self.value(expr.args[0])
                if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                    try:
                        return float(v)
                    except ValueError:
                        pass
            if fn == "slice" and not expr.keywords and len(expr.args) <= 3:
                return slice(*[self.value(a) for a in expr.args])
            if fn == "torch.Size" and len(expr.args) == 1 and not expr.keywords:
                return tuple(self.value(expr.args[0]))
        raise self.err(f"unsupported argument {ast.unparse(expr)!r}")

    def _device(self, call: ast.Call) -> str:
        kw = {k.arg: self.value(k.value) for k in call.keywords}
        args = [self.value(a) for a in call.args]
        dtype = kw.get("type", args[0] if args else None)
        index = kw.get("index", args[1] if len(args) > 1 else None)
        if not isinstance(dtype, str):
            raise self.err(f"unsupported device {ast.unparse(call)!r}")
        return dtype if index is None else f"{dtype}:{index}"

    def kwargs_of(self, call: ast.Call) -> dict:
        out = {}
        for k in call.keywords:
            if k.arg is None:
                raise self.err(f"unsupported **kwargs in {ast.unparse(call)[:80]!r}")
            if k.arg in _DROPPED_KWARGS:
                continue
            out[k.arg] = self.value(k.value)
        return out

    def resolve_group(self, name: str):
        if name in self.groups:
            g = self.groups[name]
            g = list(g)
            if g and all(isinstance(x, (list, tuple)) for x in g):  # a partition: pick this rank's part
                if self.rank is None:
                    raise self.err(f"group {name!r} is given per rank, but this graph's rank is not known")
                for part in g:
                    if self.rank in part:
                        return tuple(int(r) for r in part)
                raise self.err(f"rank {self.rank} is in no part of group {name!r}")
            return tuple(int(r) for r in g)
        if self.world_size is not None:
            return tuple(range(self.world_size))
        return name
