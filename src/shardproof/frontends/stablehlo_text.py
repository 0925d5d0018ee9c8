"""Import StableHLO text (the MLIR form of ``jax.jit(f).lower(...).as_text()``) into the
Graph IR, through the HLO importer: each ``stablehlo.*`` op is translated into the HLO
instruction of the same meaning (``dot_general`` -> ``dot``, ``reduce ... applies
stablehlo.add`` -> ``reduce`` with an add reducer, ``"stablehlo.all_reduce"`` with
``replica_groups = dense<[[0, 1]]>`` -> ``all-reduce``, ...), and
:mod:`shardproof.frontends.hlo_text` builds the graphs. Nothing is compiled or run.

The program is ``@main``; when it holds an ``sdy.manual_computation`` (a ``shard_map``),
the per-device program is that region: its block arguments are the inputs, named after
``@main``'s arguments (``loc("x")`` names them, else ``arg<i>``), and its ``sdy.return``
values the outputs. ``func.call``/``call`` of other functions are inlined. ``loc(...)``
locations (``as_text(debug_info=True)``) are the nodes' sources.
"""
from __future__ import annotations

import re
import struct

from ..ir.graph import Graph
from .fx_text import DumpError
from .hlo_parse import Computation, HloModule, Instr, _balanced, parse_shape, split_top
from .hlo_text import instantiate

__all__ = ["is_stablehlo_text", "load_stablehlo_program"]

_TYPES = {"i1": "pred", "i8": "s8", "i16": "s16", "i32": "s32", "i64": "s64", "ui8": "u8", "ui16": "u16",
          "ui32": "u32", "ui64": "u64", "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64"}
_SAME = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "and", "or", "not",
         "negate", "exponential", "log", "tanh", "logistic", "sine", "cosine", "sqrt", "rsqrt", "abs", "sign", "select",
         "convert", "reshape", "clamp", "erf"}
_RENAMED = {"log_plus_one": "log-plus-one", "exponential_minus_one": "exponential-minus-one",
            "custom_call": "custom-call", "dynamic_slice": "dynamic-slice",
            "dynamic_update_slice": "dynamic-update-slice", "all_reduce": "all-reduce", "all_gather": "all-gather",
            "reduce_scatter": "reduce-scatter", "all_to_all": "all-to-all", "collective_permute": "collective-permute",
            "optimization_barrier": "optimization-barrier"}
_OP_RE = re.compile(r"^(?P<results>%[\w.\-#:, %]+?)\s*=\s*(?P<body>.*)$", re.S)
_LOC_DEF_RE = re.compile(r"^#(?P<id>loc\d*)\s*=\s*loc\((?P<body>.*)\)\s*$")
_FILE_LINE_RE = re.compile(r'"([^"]+)":(\d+)')


def is_stablehlo_text(text: str) -> bool:
    """MLIR text of a module or function (after any ``#loc`` alias lines, as
    ``as_text(debug_info=True)`` prints them first)."""
    head = re.match(r"(?:\s*#[\w.]+\s*=[^\n]*\n)*\s*(module\b|func\.func\b)", text)
    return bool(head) and ("stablehlo." in text or "func.func" in text)


def _tensor_type(text: str):
    """``tensor<8x16xf32>`` -> an HLO shape string ``f32[8,16]``."""
    m = re.fullmatch(r"\s*tensor<(?P<body>[^>]*)>\s*", text)
    if not m:
        raise ValueError(f"cannot read type {text.strip()[:40]!r}")
    *dims, elem = m.group("body").split("x")
    if elem not in _TYPES or any(not d.isdigit() for d in dims):
        raise ValueError(f"unsupported type {text.strip()[:40]!r}")
    return f"{_TYPES[elem]}[{','.join(dims)}]"


def _strip_loc(s: str) -> tuple[str, str | None]:
    m = re.search(r"\s+loc\((.*)\)\s*$", s)
    return (s[:m.start()], m.group(1)) if m else (s, None)


class _Translator:
    def __init__(self, text: str, filename: str):
        self.filename = filename
        self.lines = text.splitlines()
        self.locs: dict[str, str] = {}
        for raw in self.lines:
            m = _LOC_DEF_RE.match(raw.strip())
            if m:
                self.locs[m.group("id")] = m.group("body")
        self.comps: dict[str, Computation] = {}
        self.count = 0
        self.names: dict[str, str] = {}  # main's argument -> input name

    def err(self, line: int, message: str) -> DumpError:
        return DumpError(self.filename, line, message)

    def where(self, loc: str | None, depth: int = 0) -> tuple[str, int] | None:
        """The first ``"file":line`` a location (or the locations it refers to) names."""
        if loc is None or depth > 20:
            return None
        m = _FILE_LINE_RE.search(loc)
        if m:
            return m.group(1), int(m.group(2))
        for ref in re.findall(r"#(loc\d*)", loc):
            found = self.where(self.locs.get(ref), depth + 1)
            if found:
                return found
        return None

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}.{self.count}"

    # ---------------------------------------------------------- statements
    def statements(self, start: int) -> list[tuple[int, str]]:
        """Ops of the module as (line, text), a multi-line op (with regions) joined; region
        markers kept as separate statements."""
        out, i = [], start
        while i < len(self.lines):
            raw = self.lines[i].strip()
            if not raw or raw.startswith("#loc"):
                i += 1
                continue
            text, first = raw, i + 1
            depth = _depth(text)
            # an op whose region holds other ops is joined only for small reducer regions
            if depth > 0 and "manual_computation" not in text and not text.startswith(("func.func", "module", "sdy.")):
                while depth > 0 and i + 1 < len(self.lines):
                    i += 1
                    nxt = self.lines[i].strip()
                    text += "\n" + nxt
                    depth += _depth(nxt)
            out.append((first, text))
            i += 1
        return out

    def run(self) -> HloModule:
        stmts = self.statements(0)
        funcs: dict[str, tuple[int, list, list]] = {}
        stack: list[tuple[str, int, list, list]] = []
        manual = None
        for line, text in stmts:
            if text.startswith("func.func"):
                m = re.match(r"func\.func\s+(?:\w+\s+)?@(?P<name>[\w.$\-]+)\(", text)
                try:
                    args = text[m.end():_balanced(text, m.end() - 1) - 1] if m else None
                except ValueError:
                    args = None
                if args is None or not text.endswith("{"):
                    raise self.err(line, f"cannot read function header {text[:80]!r}")
                stack.append((m.group("name"), line, self.block_args(args, line), []))
                continue
            if text.startswith(("module", "sdy.mesh", "}")) and "manual_computation" not in text:
                if text.startswith("}") and stack and manual is None:
                    name, fline, args, body = stack.pop()
                    funcs[name] = (fline, args, body)
                elif text.startswith("}") and manual is not None:
                    stack[-1][3].append((line, "__manual_end__" + text))
                    manual = None
                continue
            if not stack:
                raise self.err(line, f"an op outside any function: {text[:60]!r}")
            if "sdy.manual_computation" in text:
                manual = line
            stack[-1][3].append((line, text))
        if stack:
            raise self.err(len(self.lines), f"function @{stack[-1][0]} is not closed (truncated text?)")
        if "main" not in funcs:
            raise self.err(len(self.lines), "no func.func @main (not a lowered JAX program?)")
        for name, (fline, args, body) in funcs.items():
            if name != "main":
                self.function(name, fline, args, body)
        entry = self.main(*funcs["main"])
        return HloModule(self.filename, "main", self.comps, entry, {})

    def block_args(self, text: str, line: int) -> list[tuple[str, str, str | None]]:
        """``%arg0: tensor<..> {attrs} loc("x"), ...`` -> [(ssa, hlo shape, name)]."""
        out = []
        for item in split_top(text):
            if not item:
                continue
            m = re.match(r"(?P<ssa>%[\w]+)\s*:\s*(?P<type>tensor<[^>]*>)(?P<rest>.*)$", item.strip(), re.S)
            if not m:
                raise self.err(line, f"cannot read argument {item[:60]!r}")
            name = re.search(r'loc\("([^"]+)"\)', m.group("rest"))
            try:
                out.append((m.group("ssa"), _tensor_type(m.group("type")), name.group(1) if name else None))
            except ValueError as exc:
                raise self.err(line, str(exc)) from None
        return out

    def function(self, name, fline, args, body) -> None:
        comp = Computation(name, line=fline)
        env = {}
        for i, (ssa, ty, _) in enumerate(args):
            env[ssa] = self.emit(comp, "parameter", ty, [], fline, literal=str(i), base="param")
        self.body(comp, env, body)
        self.comps[name] = comp

    def main(self, fline, args, body) -> str:
        names = [n or f"arg{i}" for i, (_, _, n) in enumerate(args)]
        outer = {ssa: names[i] for i, (ssa, _, _) in enumerate(args)}
        region = next(((ln, t) for ln, t in body if "sdy.manual_computation" in t), None)
        comp = Computation("main", entry=True, line=fline)
        env: dict[str, str] = {}
        if region is None:
            for i, (ssa, ty, _) in enumerate(args):
                env[ssa] = self.emit(comp, "parameter", ty, [], fline, literal=str(i), name=names[i])
            self.body(comp, env, body)
        else:
            line, text = region
            m = re.search(r"sdy\.manual_computation\((?P<ops>[^)]*)\)", text)
            head = _strip_loc(text)[0].rstrip()
            if not m or not head.endswith("{") or " (%" not in head:
                raise self.err(line, "cannot read the sdy.manual_computation header")
            operands = [o.strip() for o in m.group("ops").split(",") if o.strip()]
            inner = self.block_args(head[head.rindex(" (%") + 2:-1].rstrip()[:-1], line)
            for i, ((ssa, ty, _), o) in enumerate(zip(inner, operands)):
                env[ssa] = self.emit(comp, "parameter", ty, [], line, literal=str(i), name=outer.get(o, f"arg{i}"))
            start = body.index(region) + 1
            end = next((k for k in range(start, len(body)) if body[k][1].startswith("__manual_end__")), len(body))
            self.body(comp, env, body[start:end], ret="sdy.return")
        self.comps["main"] = comp
        return "main"

    def emit(self, comp: Computation, opcode: str, shape: str, operands: list[str], line: int, *, literal=None,
             attrs=None, name=None, base=None, loc=None) -> str:
        name = name or self.fresh(base or opcode)
        attrs = dict(attrs or {})
        found = self.where(loc)
        if found:
            attrs["metadata"] = f'{{source_file="{found[0]}" source_line={found[1]}}}'
        try:
            parsed = parse_shape(shape) if not shape.startswith("(") else parse_shape(shape)
        except ValueError as exc:
            raise self.err(line, str(exc)) from None
        comp.instrs.append(Instr(name, parsed, opcode, operands, literal, attrs, line))
        return name

    def body(self, comp: Computation, env: dict, stmts, ret: str = "return") -> None:
        for line, text in stmts:
            text, loc = _strip_loc(text.split("\n")[0]) if "\n" not in text else (text, None)
            if text.startswith((ret, "func.return", "return", "stablehlo.return")):
                values = re.findall(r"%[\w.#]+", text.split(":")[0])
                refs = [self.ref(env, v, line) for v in values]
                if len(refs) == 1:
                    root = comp.instrs[-1] if comp.instrs and comp.instrs[-1].name == refs[0] else None
                    if root is None or any(i.root for i in comp.instrs):
                        root = next(i for i in comp.instrs if i.name == refs[0])
                    root.root = True
                else:
                    self.emit(comp, "tuple", "(" + ", ".join(_shape_text(next(
                        i for i in comp.instrs if i.name == r)) for r in refs) + ")", refs, line)
                    comp.instrs[-1].root = True
                continue
            self.op(comp, env, line, text, loc)

    def ref(self, env: dict, ssa: str, line: int) -> str:
        key = ssa.split("#")[0]
        if key not in env:
            raise self.err(line, f"{ssa} is used before it is defined")
        return env[key]

    def op(self, comp: Computation, env: dict, line: int, text: str, loc) -> None:
        m = _OP_RE.match(text)
        if not m:
            raise self.err(line, f"cannot read this op: {text.splitlines()[0][:80]!r}")
        results = [r.strip() for r in m.group("results").split(",")]
        body = m.group("body")
        if "\n" in body:  # an op with a reducer region: its location is on the closing line
            head, *rest = body.split("\n")
            last, loc = _strip_loc(rest[-1])
            body_text, region = head + " " + last.strip(), "\n".join(rest[:-1])
        else:
            body_text, region = body, ""
        sig_at = _last_top_colon(body_text)
        if sig_at is None:
            raise self.err(line, f"no type signature in {body_text[:60]!r}")
        head, sig = body_text[:sig_at].strip(), body_text[sig_at + 1:].strip()
        out_type = sig.rsplit("->", 1)[-1].strip() if "->" in sig else sig
        out_type = out_type.strip("()")
        try:
            shape = _tensor_type(out_type) if len(split_top(out_type)) == 1 else \
                "(" + ", ".join(_tensor_type(t) for t in split_top(out_type)) + ")"
        except ValueError as exc:
            raise self.err(line, str(exc)) from None
        gm = re.match(r'^"?(?P<dialect>[\w]+)\.(?P<op>[\w]+)"?\s*(?P<rest>.*)$', head, re.S)
        if not gm:
            raise self.err(line, f"cannot read op name in {head[:60]!r}")
        dialect, op, rest = gm.group("dialect"), gm.group("op"), gm.group("rest")
        operand_text = re.split(r"\b(?:applies|across|dims|dim|sizes|contracting_dims|batching_dims)\b", rest)[0]
        if "<{" in operand_text:
            operand_text = operand_text.split("<{")[0]
        operands = [self.ref(env, v, line) for v in re.findall(r"%[\w.#]+", operand_text)]
        attrs: dict[str, str] = {}
        literal = None
        name_base = op
        if dialect == "func" or op == "call":
            callee = re.search(r"@([\w.$\-]+)", rest)
            opcode, attrs["to_apply"] = "call", "%" + (callee.group(1) if callee else "?")
        elif dialect != "stablehlo":
            opcode = f"{dialect}.{op}"
        elif op == "constant":
            opcode, literal = "constant", _dense(rest, shape, self, line)
        elif op == "dot_general":
            opcode = "dot"
            for key, hlo in (("batching_dims", "batch"), ("contracting_dims", "contracting")):
                dm = re.search(key + r"\s*=\s*\[([\d,\s]*)\]\s*x\s*\[([\d,\s]*)\]", rest)
                if dm:
                    attrs[f"lhs_{hlo}_dims"], attrs[f"rhs_{hlo}_dims"] = f"{{{dm.group(1)}}}", f"{{{dm.group(2)}}}"
        elif op == "dot":
            opcode = "dot"
            attrs.update(lhs_contracting_dims="{1}", rhs_contracting_dims="{0}")
        elif op == "compare":
            opcode = "compare"
            attrs["direction"] = re.search(r"\b(EQ|NE|LT|LE|GT|GE)\b", rest).group(1)
        elif op in ("broadcast_in_dim", "transpose"):
            opcode = "broadcast" if op == "broadcast_in_dim" else "transpose"
            attrs["dimensions"] = _list_after(rest, "dims")
        elif op == "slice":
            opcode = "slice"
            sm = re.search(r"\[([^\]]*:[^\]]*)\]", rest)
            spans = [p.strip().split(":") for p in sm.group(1).split(",")] if sm else []
            attrs["slice"] = "{" + ", ".join(f"[{s[0]}:{s[1]}" + (f":{s[2]}" if len(s) > 2 else "") + "]"
                                             for s in spans) + "}"
        elif op == "concatenate":
            opcode, attrs["dimensions"] = "concatenate", "{" + re.search(r"dim\s*=\s*(\d+)", rest).group(1) + "}"
        elif op == "iota":
            opcode, attrs["iota_dimension"] = "iota", re.search(r"dim\s*=\s*(\d+)", rest).group(1)
        elif op == "reduce":
            opcode = "reduce"
            attrs["dimensions"] = _list_after(rest, "dimensions")
            applied = re.search(r"applies\s+stablehlo\.(\w+)", rest)
            attrs["to_apply"] = "%" + self.reducer(applied.group(1) if applied else _region_op(region), shape, line)
        elif op in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "collective_permute"):
            opcode = _RENAMED[op]
            groups = re.search(r"replica_groups\s*=\s*dense<(\[.*?\]\]|\[\])>", rest)
            if groups:
                attrs["replica_groups"] = groups.group(1).replace("[", "{").replace("]", "}").replace(" ", "")
            for key, hlo in (("all_gather_dim", "dimensions"), ("scatter_dimension", "dimensions"),
                             ("split_dimension", "dimensions")):
                dm = re.search(key + r"\s*=\s*(\d+)", rest)
                if dm:
                    attrs[hlo] = "{" + dm.group(1) + "}"
            pairs = re.search(r"source_target_pairs\s*=\s*dense<(\[\[.*?\]\])>", rest)
            if pairs:
                attrs["source_target_pairs"] = pairs.group(1).replace("[", "{").replace("]", "}").replace(" ", "")
            if op in ("all_reduce", "reduce_scatter"):
                attrs["to_apply"] = "%" + self.reducer(_region_op(region), "", line)
        elif op == "custom_call":
            opcode = "custom-call"
            target = re.search(r"@([\w.$\-]+)", rest)
            attrs["custom_call_target"] = f'"{target.group(1) if target else "?"}"'
        elif op == "dynamic_slice":
            opcode, attrs["dynamic_slice_sizes"] = "dynamic-slice", _list_after(rest, "sizes")
        elif op in _SAME:
            opcode = op
        else:
            opcode = _RENAMED.get(op, op.replace("_", "-"))
        name = self.emit(comp, opcode, shape, operands, line, literal=literal, attrs=attrs, base=name_base, loc=loc)
        if len(results) == 1 and ":" in results[0]:  # %0:2 = ... (several results)
            ssa, count = results[0].split(":")
            env[ssa] = name
            for k in range(int(count)):
                env[f"{ssa}#{k}"] = self.emit(comp, "get-tuple-element", _shape_text(comp.instrs[-1], k), [name], line,
                                              attrs={"index": str(k)})
        elif len(results) > 1:
            for k, r in enumerate(results):
                env[r] = self.emit(comp, "get-tuple-element", _shape_text(comp.instrs[-1], k), [name], line,
                                   attrs={"index": str(k)})
        else:
            env[results[0]] = name

    def reducer(self, op: str | None, shape: str, line: int) -> str:
        """A two-parameter reducer computation applying `op` (an unknown op gives a reducer
        the HLO importer does not recognize)."""
        op = op or "unknown"
        name = self.fresh(f"reducer_{op}")
        comp = Computation(name, line=line)
        for i in range(2):
            self.emit(comp, "parameter", "f32[]", [], line, literal=str(i), name=f"{name}.p{i}")
        self.emit(comp, _RENAMED.get(op, op), "f32[]", [f"{name}.p0", f"{name}.p1"], line, name=f"{name}.r")
        comp.instrs[-1].root = True
        self.comps[name] = comp
        return name


def _region_op(region: str) -> str | None:
    """The one binary op a reducer region applies to its two block arguments."""
    ops = re.findall(r"=\s*stablehlo\.(\w+)\s+%\w+,\s*%\w+", region)
    return ops[0] if len(ops) == 1 else None


def _list_after(text: str, key: str) -> str:
    m = re.search(key + r"\s*=\s*\[([\d,\s]*)\]", text)
    return "{" + (m.group(1) if m else "") + "}"


def _depth(text: str) -> int:
    return text.count("{") - text.count("}")


def _last_top_colon(s: str) -> int | None:
    depth, quote, last = 0, False, None
    for i, c in enumerate(s):
        if c == '"':
            quote = not quote
        elif quote:
            continue
        elif c in "([{<":
            depth += 1
        elif c in ")]}>" and not (c == ">" and i and s[i - 1] == "-"):
            depth -= 1
        elif c == ":" and depth == 0:
            last = i
    return last


def _shape_text(ins: Instr, k: int | None = None) -> str:
    ty = ins.shape if k is None else ins.shape[k]
    inv = {v: k for k, v in {"pred": "b8", "s8": "i8", "s16": "i16", "s32": "i32", "s64": "i64", "u8": "u8",
                             "u32": "u32", "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64"}.items()}
    return f"{inv.get(ty.dtype, ty.dtype)}[{','.join(map(str, ty.shape))}]"


def _dense(rest: str, shape: str, tr: _Translator, line: int) -> str:
    """``dense<2.0>`` / ``dense<[1, 2]>`` / ``dense<0xFF800000>`` -> an HLO literal."""
    m = re.search(r"dense<(.*)>", rest, re.S)
    if not m:
        raise tr.err(line, f"cannot read constant {rest[:60]!r}")
    body = m.group(1).strip()
    if body.startswith('"0x') or body.startswith("0x"):
        raw = bytes.fromhex(body.strip('"')[2:])
        dtype = shape.split("[")[0]
        fmt = {"f32": "<f", "f64": "<d", "f16": "<e", "s32": "<i", "s64": "<q"}.get(dtype)
        if fmt is None:
            return "{...}"
        size = struct.calcsize(fmt)
        # a splat is printed big-endian as one element; dense arrays little-endian
        values = [struct.unpack(">" + fmt[1], raw)[0]] if len(raw) == size else \
            [struct.unpack(fmt, raw[i:i + size])[0] for i in range(0, len(raw), size)]
        n = 1
        for d in shape.split("[")[1].rstrip("]").split(","):
            n *= int(d) if d else 1
        if len(values) == 1 and n > 1:
            values = values * n
        return "{" + ", ".join(_num(v) for v in values) + "}" if "[" in shape and shape.split("[")[1] != "]" \
            else _num(values[0])
    body = body.replace("[", "{").replace("]", "}")
    dims = [d for d in shape.split("[")[1].rstrip("]").split(",") if d]
    if dims and not body.startswith("{"):  # a splat
        n = 1
        for d in dims:
            n *= int(d)
        body = "{" + ", ".join([body] * n) + "}"
    return body.replace("0x7F800000", "inf")


def _num(v) -> str:
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def load_stablehlo_program(text: str, world_size: int, filename: str = "<stablehlo>") -> list[Graph]:
    """Translate StableHLO text and instantiate its (per-device) program for each of
    `world_size` ranks; bad input raises DumpError."""
    try:
        module = _Translator(text, filename).run()
    except DumpError:
        raise
    except Exception as exc:
        raise DumpError(filename, None, f"cannot read StableHLO: {type(exc).__name__}: {exc}") from exc
    return [instantiate(module, r, world_size) for r in range(world_size)]
