"""Parsing of XLA HLO text into modules, computations and instructions (no graph building).

The conventions of the import are described in :mod:`shardproof.frontends.hlo_text`."""
from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field

import numpy as np

from ..ir.graph import Source, TensorType
from .fx_text import DumpError

# HLO primitive types -> the IR's short dtype strings
DTYPES = {
    "pred": "b8", "s8": "i8", "s16": "i16", "s32": "i32", "s64": "i64", "u8": "u8", "u16": "u16", "u32": "u32",
    "u64": "u64", "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64", "c64": "c64", "c128": "c128",
    "f8e4m3fn": "f8e4m3fn", "f8e5m2": "f8e5m2",
}

ELEMENTWISE = {
    "add": "aten.add", "subtract": "aten.sub", "multiply": "aten.mul", "divide": "aten.div",
    "maximum": "aten.maximum", "minimum": "aten.minimum", "power": "aten.pow", "remainder": "aten.remainder",
    "and": "aten.logical_and", "or": "aten.logical_or", "not": "aten.logical_not", "negate": "aten.neg",
    "exponential": "aten.exp", "log": "aten.log", "log-plus-one": "aten.log1p", "exponential-minus-one": "aten.expm1",
    "rsqrt": "aten.rsqrt", "sqrt": "aten.sqrt", "tanh": "aten.tanh", "logistic": "aten.sigmoid",
    "sine": "aten.sin", "cosine": "aten.cos", "abs": "aten.abs", "sign": "aten.sign", "select": "aten.where",
    "erf": "aten.erf",
}
COMPARE = {"EQ": "aten.eq", "NE": "aten.ne", "LT": "aten.lt", "LE": "aten.le", "GT": "aten.gt", "GE": "aten.ge"}
# a reducer computation's ROOT opcode -> the reduction it applies
REDUCERS = {"add": "sum", "maximum": "max", "minimum": "min", "multiply": "prod", "and": "and", "or": "or"}
_PASS_THROUGH = {"copy", "bitcast", "optimization-barrier", "copy-start", "copy-done"}

_HEADER_RE = re.compile(r"^\s*(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*(?P<sig>\(.*\))?\s*(?:->\s*.*)?\{\s*$")
_INSTR_RE = re.compile(r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
_ARRAY_RE = re.compile(r"^(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\](?:\{[^}]*\})?$")
_FRAME_RE = re.compile(r"['\"]([^'\"]+):(\d+)['\"]")
_TABLE_RE = re.compile(r"^(FileNames|FunctionNames|FileLocations|StackFrames)\s*$")


@dataclass
class Instr:
    name: str
    shape: object  # TensorType, tuple of shapes, or None (token)
    opcode: str
    operands: list[str]
    literal: str | None
    attrs: dict[str, str]
    line: int
    root: bool = False


@dataclass
class Computation:
    name: str
    instrs: list[Instr] = field(default_factory=list)
    entry: bool = False
    line: int = 0

    @property
    def root(self) -> Instr:
        return next((i for i in self.instrs if i.root), self.instrs[-1])


@dataclass
class HloModule:
    """A parsed module: computations by name and the entry's name."""
    filename: str
    name: str
    computations: dict[str, Computation]
    entry: str
    frames: dict[int, tuple[str, int, str, int]]  # stack frame id -> (file, line, function, parent id)

    def group_size(self) -> int | None:
        """The number of ranks the collectives' replica groups span (None: no groups given)."""
        ranks = set()
        for comp in self.computations.values():
            for ins in comp.instrs:
                for group in _replica_groups(ins.attrs.get("replica_groups"), None, self.filename, ins.line) or ():
                    ranks.update(group)
                for pair in _int_lists(ins.attrs.get("source_target_pairs", "")):
                    ranks.update(pair)
        return max(ranks) + 1 if ranks else None


def is_hlo_text(text: str) -> bool:
    """Whether `text` is an HLO module as XLA prints it (starts with ``HloModule``)."""
    return text.lstrip().startswith("HloModule")


# ---------------------------------------------------------------- scanning

def split_top(s: str, sep: str = ",") -> list[str]:
    """Split at top-level `sep` (outside brackets and quoted strings)."""
    out, depth, cur, quote, i = [], 0, [], None, 0
    while i < len(s):
        c = s[i]
        if quote:
            cur.append(c)
            if c == "\\" and i + 1 < len(s):
                cur.append(s[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c == '"':
            quote = c
            cur.append(c)
        elif c in "([{":
            depth += 1
            cur.append(c)
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced {c!r}")
            cur.append(c)
        elif c == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if quote or depth:
        raise ValueError("unbalanced brackets or quotes (truncated line?)")
    tail = "".join(cur).strip()
    if tail or out:
        out.append(tail)
    return out


def _balanced(s: str, start: int) -> int:
    """Index just past the bracket group opening at s[start]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack, quote, i = [], None, start
    while i < len(s):
        c = s[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c == '"':
            quote = c
        elif c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                raise ValueError(f"unbalanced {c!r}")
            if not stack:
                return i + 1
        i += 1
    raise ValueError("unbalanced brackets (truncated line?)")


def parse_shape(text: str):
    """``f16[2048,64]{1,0}`` -> TensorType; ``(a, b)`` -> tuple; ``token[]`` -> None."""
    text = text.strip()
    if text.startswith("("):
        inner = text[1:-1] if text.endswith(")") else None
        if inner is None:
            raise ValueError(f"bad tuple shape {text!r}")
        parts = [p for p in split_top(_strip_comments(inner)) if p]
        return tuple(parse_shape(p) for p in parts)
    m = _ARRAY_RE.match(text)
    if not m:
        raise ValueError(f"bad shape {text!r}")
    dtype = m.group("dtype")
    if dtype == "token":
        return None
    if dtype not in DTYPES:
        raise ValueError(f"unknown element type {dtype!r}")
    dims = [d.strip() for d in m.group("dims").split(",") if d.strip()]
    if any(not d.isdigit() for d in dims):
        raise ValueError(f"dynamic or malformed dims in {text!r}")
    return TensorType(tuple(int(d) for d in dims), DTYPES[dtype])


def _strip_comments(s: str) -> str:
    return re.sub(r"/\*.*?\*/", "", s)


def _int_list(text: str | None) -> list[int]:
    """``{1,2}`` or ``[1, 2]`` -> [1, 2]; missing -> []."""
    if not text:
        return []
    body = text.strip().strip("{}[]")
    return [int(x) for x in body.replace(" ", "").split(",") if x]


def _int_lists(text: str) -> list[list[int]]:
    """``{{0,1},{2,3}}`` -> [[0, 1], [2, 3]]."""
    return [[int(x) for x in g.split(",") if x.strip()] for g in re.findall(r"\{([\d,\s]*)\}", text or "")]


def _replica_groups(text: str | None, world: int | None, filename: str, line: int) -> list[list[int]] | None:
    """Explicit ``{{0,1},{2,3}}`` or the iota form ``[G,S]<=[N]`` (optionally transposed
    ``[G,S]<=[a,b]T(1,0)``); None when absent or empty (every rank)."""
    if text is None:
        return None
    text = text.strip()
    m = re.match(r"^\[(?P<shape>[\d,\s]+)\]<=\[(?P<dims>[\d,\s]+)\](?:T\((?P<perm>[\d,\s]+)\))?$", text)
    if m:
        shape = [int(x) for x in m.group("shape").split(",")]
        dims = [int(x) for x in m.group("dims").split(",")]
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if m.group("perm"):
            ids = ids.transpose([int(x) for x in m.group("perm").split(",")])
        return [list(map(int, g)) for g in ids.reshape(shape)]
    if not text.startswith("{"):
        raise DumpError(filename, line, f"cannot read replica_groups={text}")
    groups = _int_lists(text[1:-1]) if text.startswith("{{") else ([_int_list(text)] if _int_list(text) else [])
    return groups or None


def _dims_attr(attrs: dict, key: str) -> list[int]:
    return _int_list(attrs.get(key))


# ---------------------------------------------------------------- module parsing

def _tables(lines: list[str]) -> dict[int, tuple[str, int, str, int]]:
    """JAX's FileNames/FunctionNames/FileLocations/StackFrames tables -> frame id ->
    (file, line, function, parent frame id)."""
    files, fns, locs, frames, table = {}, {}, {}, {}, None
    for raw in lines:
        s = raw.strip()
        m = _TABLE_RE.match(s)
        if m:
            table = m.group(1)
            continue
        if not s or table is None:
            table = None if not s else table
            continue
        head, _, rest = s.partition(" ")
        if not head.isdigit():
            table = None
            continue
        key = int(head)
        if table in ("FileNames", "FunctionNames"):
            (files if table == "FileNames" else fns)[key] = rest.strip().strip('"')
        else:
            kv = dict(re.findall(r"(\w+)=(\d+)", rest))
            if table == "FileLocations":
                locs[key] = (int(kv.get("file_name_id", 0)), int(kv.get("function_name_id", 0)), int(kv.get("line", 0)))
            else:
                frames[key] = (int(kv.get("file_location_id", 0)), int(kv.get("parent_frame_id", 0)))
    out = {}
    for fid, (loc, parent) in frames.items():
        f, fn, line = locs.get(loc, (0, 0, 0))
        out[fid] = (files.get(f, "?"), line, fns.get(fn, ""), parent)
    return out


def _instruction(text: str, line: int, filename: str) -> Instr:
    m = _INSTR_RE.match(text)
    if not m:
        raise DumpError(filename, line, f"cannot read this instruction: {text.strip()[:80]!r}")
    rest = m.group("rest").strip()
    try:
        if rest.startswith("("):
            end = _balanced(rest, 0)
        else:
            end = rest.index(" ")
            if "{" in rest[:end] and not rest[:end].endswith("}"):  # a layout with spaces
                end = _balanced(rest, rest.index("{"))
        shape = parse_shape(_strip_comments(rest[:end]))
        rest = rest[end:].strip()
        op_m = re.match(r"^([\w\-]+)\(", rest)
        if not op_m:
            raise ValueError(f"expected opcode(operands) after the shape, got {rest[:40]!r}")
        opcode = op_m.group(1)
        close = _balanced(rest, len(opcode))
        inner = rest[len(opcode) + 1:close - 1]
        tail = rest[close:].strip()
        attrs: dict[str, str] = {}
        if tail:
            if not tail.startswith(","):
                raise ValueError(f"unexpected text after the operands: {tail[:40]!r}")
            for item in split_top(tail[1:]):
                key, eq, value = item.partition("=")
                if not eq or not key.strip():
                    raise ValueError(f"attribute without a value: {item[:40]!r}")
                attrs[key.strip()] = value.strip()
    except ValueError as exc:
        raise DumpError(filename, line, f"cannot read instruction {m.group('name')}: {exc}") from None
    literal, operands = None, []
    if opcode in ("constant", "parameter"):
        literal = inner.strip()
    elif inner.strip():
        for item in split_top(_strip_comments(inner)):
            ref = re.search(r"%?([\w.\-]+)\s*$", item)
            if not ref:
                raise DumpError(filename, line, f"cannot read operand {item[:40]!r} of {m.group('name')}")
            operands.append(ref.group(1))
    return Instr(m.group("name"), shape, opcode, operands, literal, attrs, line, bool(m.group("root")))


def parse_hlo(text: str, filename: str = "<hlo>") -> HloModule:
    """Parse HLO text into computations (no graph yet; see :func:`load_hlo_program`)."""
    if not isinstance(text, str):
        raise DumpError(filename, None, f"expected text, got {type(text).__name__}")
    lines = text.splitlines()
    if not lines or not is_hlo_text(text):
        raise DumpError(filename, 1, "not an HLO module (expected a first line 'HloModule <name>, ...')")
    first = next(i for i, raw in enumerate(lines) if raw.strip())
    name = lines[first].strip().split()[1].rstrip(",") if len(lines[first].split()) > 1 else "?"
    comps: dict[str, Computation] = {}
    cur: Computation | None = None
    entry = None
    for i, raw in enumerate(lines[first + 1:], start=first + 2):
        s = raw.strip()
        if not s or s.startswith("//"):
            continue
        if cur is None:
            if s.endswith("{") and ("(" in s or s.startswith("ENTRY")):
                m = _HEADER_RE.match(s)
                if not m:
                    raise DumpError(filename, i, f"cannot read computation header {s[:80]!r}")
                cur = Computation(m.group("name"), entry=s.startswith("ENTRY"), line=i)
                if m.group("name") in comps:
                    raise DumpError(filename, i, f"computation {m.group('name')} is defined twice")
                if cur.entry:
                    if entry is not None:
                        raise DumpError(filename, i, "a second ENTRY computation")
                    entry = cur.name
            continue
        if s == "}":
            if not cur.instrs:
                raise DumpError(filename, i, f"computation {cur.name} has no instructions")
            comps[cur.name] = cur
            cur = None
            continue
        ins = _instruction(s, i, filename)
        if any(x.name == ins.name for x in cur.instrs):
            raise DumpError(filename, i, f"instruction {ins.name} is defined twice")
        cur.instrs.append(ins)
    if cur is not None:
        raise DumpError(filename, len(lines), f"computation {cur.name} is not closed (truncated module?)")
    if entry is None:
        raise DumpError(filename, len(lines), "no ENTRY computation (truncated module?)")
    return HloModule(filename, name, comps, entry, _tables(lines))


# ---------------------------------------------------------------- literals

def _literal(text: str, ty, filename: str, line: int):
    """A constant's printed literal as an array of `ty`'s shape, or None when elided."""
    body = text.strip()
    if "..." in body:
        return None
    if body.startswith("{") or body.startswith("["):
        body = body.replace("{", "[").replace("}", "]")
    body = re.sub(r"(?<![\w.])-?inf\b", lambda m: f"float('{m.group(0)}')", body)
    body = re.sub(r"(?<![\w.])-?nan\b", "float('nan')", body)
    body = body.replace("true", "True").replace("false", "False")
    try:
        tree = ast.parse(body, mode="eval")
        value = _eval_literal(tree.body)
    except (SyntaxError, ValueError) as exc:
        raise DumpError(filename, line, f"cannot read constant literal {text[:60]!r}: {exc}") from None
    dtype = bool if ty.dtype == "b8" else (np.int64 if ty.dtype.startswith(("i", "u")) else np.float64)
    arr = np.asarray(value, dtype=dtype)
    if arr.size != ty.numel:
        raise DumpError(filename, line, f"constant literal has {arr.size} values, its shape {list(ty.shape)} "
                                        f"needs {ty.numel}")
    return arr.reshape(ty.shape)


def _eval_literal(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval_literal(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float" \
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
        return float(node.args[0].value)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval_literal(e) for e in node.elts]
    raise ValueError(f"unexpected {type(node).__name__}")


# ---------------------------------------------------------------- sources

_LIBRARY_MARKS = ("site-packages", "dist-packages", "/jax/_src/", "/torch_neuronx/")


def _source(ins: Instr, module: HloModule) -> Source | None:
    meta = ins.attrs.get("metadata")
    if not meta:
        return None
    fields = dict((k, _unquote(v)) for k, v in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)', meta))
    op_name = fields.get("op_name") or fields.get("op_type") or ""
    frames: list[tuple[str, int, str]] = []
    if "stack_frame_id" in fields and fields["stack_frame_id"].isdigit():
        fid, seen = int(fields["stack_frame_id"]), set()
        while fid in module.frames and fid not in seen:
            seen.add(fid)
            f, line, fn, parent = module.frames[fid]
            frames.append((f, line, fn))  # innermost first
            fid = parent
    elif "source_file" in fields:
        path, sep, stack = fields["source_file"].partition("\n----\n")
        listed = [(f, int(n), "") for f, n in _FRAME_RE.findall(stack)] if sep else []
        frames = listed[::-1] or [(path, int(fields.get("source_line", 0) or 0), "")]
    if not frames:
        return None
    user = [f for f in frames if not any(mark in f[0] for mark in _LIBRARY_MARKS)] or frames
    file, line, fn = user[0]
    outer = [f"{os.path.basename(f)}:{n}" for f, n, _ in user[1:4]]
    code = op_name + (f" (called from {' < '.join(outer)})" if outer else "")
    return Source(file, line, fn, code.strip())


def _unquote(v: str) -> str:
    if v.startswith('"') and v.endswith('"'):
        body = v[1:-1]
        return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)
    return v
