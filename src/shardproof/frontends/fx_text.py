"""Import readable FX graph dumps (``GraphModule.print_readable()`` text) into the Graph IR.

The dump is read with :mod:`ast` only: nothing in the file is executed, imported or
unpickled, and torch is not needed. The result follows the conventions of
:func:`shardproof.frontends.torch_capture.from_fx`:

* placeholders (``forward(self, primals_1: "f32[64, 16]", ...)``, or the joint-graph
  form ``primals_1: "f32[..]"; ...`` + ``primals_1, ... = fx_pytree.tree_flatten_spec(...)``)
  become ``input`` nodes named by the parameter, typed from the annotation;
* ``name: "f32[..]" = torch.ops.NS.OP.OVERLOAD(args, kw=...)`` (or ``torch.ops.NS.OP(...)``)
  becomes ``Node(name, "NS.OP", args, kwargs, TensorType, Source)``; other callables
  (``operator.mul``, Python operators printed as ``a * b``...) are named like ``from_fx``
  names them: by the function's ``__name__`` (``getitem``, ``mul``, ``add``...);
* ``x[1]`` / ``operator.getitem(x, 1)`` becomes ``Node(op="getitem", args=(x, 1))``; an
  unannotated multi-output producer gets a tuple type filled from its getitems
  (``None`` where no getitem says);
* dtypes become the short strings of the annotations (``torch.float32`` -> ``"f32"``),
  ``device``/``layout``/``pin_memory``/``memory_format``/``non_blocking`` kwargs are dropped,
  other devices/layouts/memory formats are kept as strings (``"cuda:0"``, ``"torch.strided"``);
* the last (string) argument of ``_c10d_functional`` collectives -- and of vLLM's
  ``vllm.all_reduce``/``all_gather``/``reduce_scatter`` -- is replaced by a tuple of global
  ranks (``groups`` mapping, else every rank when ``world_size`` is known, else kept);
* ``# File: path:line in fn, code: ...`` comments give the source of the statements that
  follow them, up to the next ``# File:`` comment or blank line;
* ``return (a, b, None, c)`` gives outputs ``out0``, ``out1``, ``out3``; a single returned
  node is ``out``.

Constants. ``self._tensor_constantN`` (get_attr) becomes an op ``constant`` node with
``kwargs={"value": None}``: the value is not in the dump (it lived in the pickled module),
unless the caller supplies it (``constants={"_tensor_constant0": 0.5}``: every element of
the constant holds that scalar), or the source line in force made a 0-d constant from a
number literal in an indexed assignment (``masked_input[input_mask] = 0``): then it is that
number. Its type is the annotation, or that of the ``lift_fresh_copy`` reading it when the
get_attr line has none. ``lift_fresh_copy`` itself stays an ``aten.lift_fresh_copy`` node.
A placeholder whose value the caller supplies (a backward graph takes the forward's
tensor constants as inputs) becomes such a constant node too.

Every node's ``origin`` is the dump file and the line it was read from.

Symbolic sizes (``"f32[s0, 16]"``, ``"Sym(s0)"``) must be resolved through
``symbols={"s0": 8}``; an unresolved symbol in a tensor type is a :class:`DumpError`.
A ``Sym`` placeholder becomes a ``constant`` node holding the resolved int. ``Sym``
annotations on op nodes (size computations) give type ``None``.

Mutating custom ops (``auto_functionalized`` higher-order op).
``auto_functionalized(torch.ops.NS.OP.default, a=x, b=y, ...)`` becomes one node with op
``"NS.OP"`` and the op's keyword arguments; its outputs follow the HOP convention: index 0
is the op's own return (``None`` for ops returning nothing), then the new values of the
mutated arguments in schema order. The schema is not in the dump, so which kwargs are
mutated is left to the op's rule; getitem indices are kept as printed.

``auto_functionalized_v2`` passes mutated tensors indirectly: ``_all_bases=[b0, b1, ...]``
lists the base tensors, and each mutated argument ``x`` is described by
``_x_base_index=i`` plus, when it is a view of the base, ``_x_alias=True``,
``_x_slice_dim/_x_slice_start/_x_slice_end`` or ``_x_size/_x_stride/_x_storage_offset``
(list arguments: ``_x_length=n`` and ``_x_0_base_index`` ...). Output ``1 + j`` is the new
value of base ``j``. The importer rewrites this into the v1 form above, so rules see one
convention: the op node gets kwarg ``x`` = the base (or a synthetic ``aten.slice`` /
``aten.as_strided`` view node named ``<node>.x``), and output ``1 + k`` of the op node is
the new value of its k-th mutated argument. Each printed ``getitem = v2[1 + j]`` keeps its
name and becomes either ``getitem(op_node, 1 + k)`` (the argument is the whole base) or
``aten.slice_scatter`` / ``aten.as_strided_scatter`` of the new argument value back into
the base. Assumed: the wrapped op returns at most one value (true of every op seen in the
dumps; a multi-return op would shift the indices).
"""
from __future__ import annotations

import ast
import os
from typing import Any

import numpy as np

from ..ir.graph import Graph, Node, Source, TensorType
from .fx_functionalized import AutoFunctionalized
from .fx_syntax import assigned_literal as _assigned_literal, dotted_name as _dotted
from .fx_syntax import fix_class_names as _fix_class_names, sources as _sources, torch_op_name as _torch_op_name
from .fx_values import (_BINOPS, _CMPOPS, _GROUP_OPS, _GROUP_PREFIXES, 
                        _UNARYOPS, TORCH_DTYPES, DumpError, ValueParser, read_dump)

__all__ = ["DumpError", "parse_graph", "load_graph", "TORCH_DTYPES"]  # directories of rank files: fx_program


class _Parser(ValueParser, AutoFunctionalized):
    def __init__(self, text: str, filename: str, groups, world_size, symbols, rank, constants):
        self.text = text
        self.filename = filename
        self.groups = dict(groups or {})
        self.world_size = world_size
        self.symbols = dict(symbols or {})
        self.constants = dict(constants or {})
        self.rank = rank
        self.graph = Graph(label=filename)
        self.env: dict[str, Node] = {}
        self.line = 1
        self.v2: dict[Node, dict] = {}  # auto_functionalized_v2 node -> base index -> mutations
        self.submodules: set[str] = set()
        self.sources: list[Source | None] = []
        self.current = ""

    def add(self, node: Node) -> Node:
        if node.name in self.env:
            raise self.err(f"{node.name!r} is defined twice")
        node.origin = Source(self.filename, self.line)
        self.env[node.name] = node
        self.graph.nodes.append(node)
        return node

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.env:
            name, i = f"{base}.{i}", i + 1
        return name
    # ------------------------------------------------------------ statements
    @property
    def src(self) -> Source | None:
        return self.sources[self.line] if 0 <= self.line < len(self.sources) else None

    def call_node(self, name: str, call: ast.Call, ann_type) -> Node:
        fn = _dotted(call.func)
        if fn is None:
            raise self.err(f"unsupported call {ast.unparse(call)[:80]!r}")
        op = _torch_op_name(fn)
        if op in ("higher_order.auto_functionalized", "higher_order.auto_functionalized_v2"):
            return self.auto_functionalized(name, call, ann_type, v2=op.endswith("_v2"))
        if op is None:
            if fn.split(".", 1)[0] in self.env:
                raise self.err(f"unsupported call {fn}(...): a method call (call_method node); "
                               "only ATen-level graphs are supported")
            if fn.startswith("torch.ops."):
                raise self.err(f"cannot read op name from {fn!r}")
            op = fn.rsplit(".", 1)[-1]  # like from_fx: the callable's __name__
        args = tuple(self.value(a) for a in call.args)
        kwargs = self.kwargs_of(call)
        if op == "getitem":
            return self.getitem(name, args, ann_type)
        if (op.startswith(_GROUP_PREFIXES) or op in _GROUP_OPS) and args and isinstance(args[-1], str):
            args = args[:-1] + (self.resolve_group(args[-1]),)
        if "group_name" in kwargs and isinstance(kwargs["group_name"], str) and (
                op.startswith(_GROUP_PREFIXES) or op in _GROUP_OPS):
            kwargs["group_name"] = self.resolve_group(kwargs["group_name"])
        node = self.add(Node(name, op, args, kwargs, ann_type, self.src))
        if op == "aten.lift_fresh_copy" and args and isinstance(args[0], Node) and args[0].op == "constant" \
                and args[0].type is None and isinstance(ann_type, TensorType):
            args[0].type = ann_type
        return node

    def getitem(self, name: str, args: tuple, ann_type) -> Node:
        if len(args) != 2 or not isinstance(args[0], Node):
            raise self.err(f"getitem of something that is not a node: {args!r}")
        producer, index = args
        if producer in self.v2 and isinstance(index, int):
            return self.v2_getitem(name, producer, index, ann_type)
        node = self.add(Node(name, "getitem", (producer, index), {}, ann_type, self.src))
        if isinstance(index, int) and not isinstance(index, bool) and index >= 0 and (
                producer.type is None or isinstance(producer.type, tuple)):
            self.set_output_type(producer, index, ann_type)
        return node

    @staticmethod
    def set_output_type(producer: Node, index: int, ty) -> None:
        types = list(producer.type or ())
        if len(types) <= index:
            types.extend([None] * (index + 1 - len(types)))
        if ty is not None or types[index] is None:
            types[index] = ty
        producer.type = tuple(types)

    # ------------------------------------------------------------ the function body
    def assign(self, name: str, expr: ast.AST, ann_type) -> None:
        self.current = name
        if isinstance(ann_type, tuple):  # Sym annotation on a non-placeholder: handled by parse_type
            ann_type = None
        if isinstance(expr, ast.Call):
            self.call_node(name, expr, ann_type)
        elif isinstance(expr, ast.Subscript):
            producer = self.value(expr.value)
            index = self.value(expr.slice)
            self.getitem(name, (producer, index), ann_type)
        elif isinstance(expr, ast.Attribute) and (_dotted(expr) or "").startswith("self.") \
                and (_dotted(expr) or "").count(".") == 1:
            value = _assigned_literal(self.src, ann_type)
            self.add(Node(name, "constant", kwargs={"value": value}, type=ann_type, source=self.src))
        elif isinstance(expr, (ast.BinOp, ast.UnaryOp, ast.Compare)):
            self.operator(name, expr, ann_type)
        elif isinstance(expr, ast.Name) and expr.id in self.env:
            if name in self.env:
                raise self.err(f"{name!r} is defined twice")
            self.env[name] = self.env[expr.id]
        else:
            v = self.value(expr)
            if isinstance(v, Node):
                self.env[name] = v
            else:
                self.add(Node(name, "constant", kwargs={"value": v}, type=ann_type, source=self.src))

    def operator(self, name: str, expr: ast.AST, ann_type) -> None:
        if isinstance(expr, ast.BinOp) and type(expr.op) in _BINOPS:
            op, args = _BINOPS[type(expr.op)], (self.value(expr.left), self.value(expr.right))
        elif isinstance(expr, ast.UnaryOp) and type(expr.op) in _UNARYOPS:
            op, args = _UNARYOPS[type(expr.op)], (self.value(expr.operand),)
        elif isinstance(expr, ast.Compare) and len(expr.ops) == 1 and type(expr.ops[0]) in _CMPOPS:
            op, args = _CMPOPS[type(expr.ops[0])], (self.value(expr.left), self.value(expr.comparators[0]))
        else:
            raise self.err(f"unsupported expression {ast.unparse(expr)[:80]!r}")
        if not any(isinstance(a, Node) for a in args):
            self.add(Node(name, "constant", kwargs={"value": self.value(expr)}, type=ann_type, source=self.src))
            return
        self.add(Node(name, op, args, {}, ann_type, self.src))

    def input(self, name: str, ty, line: int) -> None:
        self.line = line
        if isinstance(ty, tuple) and ty and ty[0] == "sym":
            self.add(Node(name, "constant", kwargs={"value": ty[1]}))
        else:
            self.add(Node(name, "input", type=ty))

    def outputs(self, value: ast.AST | None) -> None:
        if value is None:
            return
        if isinstance(value, ast.Call) and (_dotted(value.func) or "").endswith("tree_unflatten") and value.args:
            value = value.args[0]
        if isinstance(value, (ast.Tuple, ast.List)):
            flat = []

            def walk(v):
                if isinstance(v, (list, tuple)):
                    for x in v:
                        walk(x)
                else:
                    flat.append(v)
            walk(self.value(value))
            for i, v in enumerate(flat):
                if isinstance(v, Node):
                    self.graph.outputs[f"out{i}"] = v
            return
        v = self.value(value)
        if isinstance(v, Node):
            self.graph.outputs["out"] = v

    def run(self) -> Graph:
        text = _fix_class_names(self.text)
        lines = text.splitlines()
        self.sources = _sources(lines)
        try:
            module = ast.parse(text, filename=self.filename)
        except SyntaxError as exc:
            raise DumpError(self.filename, exc.lineno or len(lines),
                            f"syntax error: {exc.msg} (truncated or garbled dump?)") from None
        except (ValueError, RecursionError, MemoryError) as exc:
            raise DumpError(self.filename, None, f"cannot parse: {exc}") from None
        fn = self.find_forward(module)
        self.line = fn.lineno
        body = fn.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        # joint graphs: forward(self, primals, tangents) + "a, b, ... = fx_pytree.tree_flatten_spec(...)"
        containers, unpacked = set(), False
        for st in body:
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) and (
                    _dotted(st.value.func) or "").endswith("tree_flatten_spec"):
                unpacked = True
                for a in st.value.args:
                    for n in ast.walk(a):
                        if isinstance(n, ast.Name):
                            containers.add(n.id)
        params = list(fn.args.posonlyargs) + list(fn.args.args) + list(fn.args.kwonlyargs)
        if params and params[0].arg == "self":
            params = params[1:]
        for p in params:
            if p.arg in containers and p.annotation is None:
                continue
            self.line = p.lineno
            self.input(p.arg, self.parse_type(p.annotation, placeholder=True), p.lineno)
        declared: dict[str, Any] = {}
        for st in body:
            self.line = st.lineno
            self.current = ""
            self.statement(st, declared, unpacked)
        if not any(isinstance(st, ast.Return) for st in body):  # every FX graph ends with its outputs
            raise DumpError(self.filename, fn.end_lineno, "the forward ends without a return statement "
                                                          "(truncated dump?)")
        self.finish()
        return self.graph

    def find_forward(self, module: ast.Module) -> ast.FunctionDef:
        for st in module.body:
            if isinstance(st, ast.FunctionDef) and st.name == "forward":
                return st
        for st in module.body:
            if isinstance(st, ast.ClassDef):
                for sub in st.body:
                    if isinstance(sub, ast.FunctionDef) and sub.name == "forward":
                        self.submodules = {s.name for s in st.body if isinstance(s, ast.ClassDef)}
                        return sub
        raise DumpError(self.filename, 1, "no forward(...) definition found (not a print_readable() dump?)")

    def statement(self, st: ast.stmt, declared: dict, unpacked: bool) -> None:
        if isinstance(st, ast.AnnAssign):
            if not isinstance(st.target, ast.Name):
                raise self.err(f"unsupported assignment target {ast.unparse(st.target)!r}")
            name = st.target.id
            if st.value is None:  # placeholder declaration (joint graphs)
                ty = self.parse_type(st.annotation, placeholder=True)
                if unpacked:
                    declared[name] = ty
                elif name not in self.env:
                    self.input(name, ty, st.lineno)
                return
            if isinstance(st.value, ast.Constant) and st.value.value is None:
                return
            self.assign(name, st.value, self.parse_type(st.annotation))
        elif isinstance(st, ast.Assign):
            if isinstance(st.value, ast.Constant) and st.value.value is None:
                return  # "x = None" / "a = b = None": freeing
            if len(st.targets) != 1:
                raise self.err(f"unsupported chained assignment {ast.unparse(st)[:80]!r}")
            target = st.targets[0]
            if isinstance(target, (ast.Tuple, ast.List)) and isinstance(st.value, ast.Call) and (
                    _dotted(st.value.func) or "").endswith("tree_flatten_spec"):
                for e in target.elts:
                    if not isinstance(e, ast.Name):
                        raise self.err(f"unsupported unpacking target {ast.unparse(e)!r}")
                    if e.id not in self.env:
                        self.input(e.id, declared.get(e.id), st.lineno)
                return
            if not isinstance(target, ast.Name):
                raise self.err(f"unsupported assignment target {ast.unparse(target)[:80]!r}")
            self.assign(target.id, st.value, None)
        elif isinstance(st, ast.Return):
            self.outputs(st.value)
        elif isinstance(st, ast.Expr):
            if isinstance(st.value, ast.Constant):
                return
            if isinstance(st.value, ast.Call):
                self.assign(self.fresh(f"_stmt_line{st.lineno}"), st.value, None)
                return
            raise self.err(f"unsupported statement {ast.unparse(st)[:80]!r}")
        elif isinstance(st, (ast.Pass, ast.Delete)):
            return
        else:
            raise self.err(f"unsupported statement {ast.unparse(st).splitlines()[0][:80]!r}")

    def finish(self) -> None:
        # getitems without annotations take the type their producer's other uses gave
        for n in self.graph.nodes:
            if n.op == "getitem" and n.type is None and isinstance(n.args[0], Node) \
                    and isinstance(n.args[0].type, tuple) and isinstance(n.args[1], int) \
                    and 0 <= n.args[1] < len(n.args[0].type):
                n.type = n.args[0].type[n.args[1]]
        # tensor constants whose value the caller supplied (once their types are known)
        for n in self.graph.nodes:
            if n.op == "input" and n.name in self.constants:  # a saved constant the backward takes as input
                n.op = "constant"
            if n.op == "constant" and n.kwargs.get("value") is None and n.name in self.constants:
                self.line = n.origin.line
                n.kwargs["value"] = self.constant_value(n, self.constants[n.name])

    def constant_value(self, node: Node, value):
        """A supplied scalar as the constant's value: every element holds it, in the dtype
        live capture uses (float64, int64 or bool); or a list of the elements in order (a
        table the dump does not print, e.g. RoPE's inverse frequencies)."""
        if isinstance(value, list) and isinstance(node.type, TensorType):
            elements = np.asarray(value, dtype=np.float64)
            if elements.ndim != 1 or elements.size != int(np.prod(node.type.shape)):
                raise self.err(f"constant {node.name} is {node.type}: give one number or "
                               f"{int(np.prod(node.type.shape))} of them, not {elements.size}")
            kind = {"b8": bool}.get(node.type.dtype, np.int64 if node.type.dtype.startswith(("i", "u")) else np.float64)
            return elements.astype(kind).reshape(node.type.shape)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err(f"the value given for constant {node.name} must be a number, not {value!r}")
        if not isinstance(node.type, TensorType):
            return value
        if node.type.dtype == "b8":
            dtype = bool
        elif node.type.dtype.startswith(("i", "u")):
            if value != int(value):
                raise self.err(f"constant {node.name} is {node.type}: the value given, {value!r}, is not an integer")
            dtype = np.int64
        else:
            dtype = np.float64
        return np.full(node.type.shape, value, dtype=dtype)


# ---------------------------------------------------------------- API

def parse_graph(text: str, filename: str = "<dump>", groups: dict[str, Any] | None = None,
                world_size: int | None = None, *, symbols: dict[str, int] | None = None,
                rank: int | None = None, constants: dict[str, float] | None = None) -> Graph:
    """Parse one ``print_readable()`` dump into a Graph (see the module doc for conventions).

    ``groups`` maps a collective's group name to its global ranks (a tuple), or to a
    partition (a list of tuples: this ``rank``'s part is used); names not in it mean every
    rank ``0..world_size-1`` when ``world_size`` is given, else stay strings. ``symbols``
    resolves symbolic sizes; ``constants`` gives scalar values of ``self._tensor_constantN``
    by name. Raises :class:`DumpError` (``file:line: ...``) on bad input.
    """
    if not isinstance(text, str):
        raise DumpError(filename, None, f"expected text, got {type(text).__name__}")
    p = _Parser(text, filename, groups, world_size, symbols, rank, constants)
    try:
        return p.run()
    except DumpError:
        raise
    except Exception as exc:  # never let a malformed dump escape as anything else
        raise DumpError(filename, p.line, f"cannot import this statement: {type(exc).__name__}: {exc}") from exc


def load_graph(path: str, **kw) -> Graph:
    """Read and parse one dump file (keyword arguments as for :func:`parse_graph`)."""
    path = os.fspath(path)
    return parse_graph(read_dump(path), filename=kw.pop("filename", path), **kw)
