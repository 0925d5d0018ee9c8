"""Import XLA HLO text (``HloModule ...`` as XLA prints it) into the Graph IR.

The text is parsed, never compiled or run, and neither XLA nor JAX is needed. One module
is one SPMD program: :func:`load_hlo_program` instantiates it once per rank, and each
collective's ``replica_groups`` give that rank its group (no groups, or ``{}``: every rank).

Conventions (the FX importer's, where they apply):

* the ENTRY computation is the program; its ``parameter(i)`` instructions become
  ``input`` nodes named by the instruction (``p9.10``); outputs are named by position,
  since instruction names differ between programs: the ROOT value is ``out0``, a ROOT
  tuple gives ``out0``, ``out1``, ... (``aten.alias`` nodes of the values); a ``tuple``
  instruction is no node (``get-tuple-element`` of it is the element itself);
* HLO opcodes map onto the registry's ops: elementwise arithmetic, ``compare``, ``select``,
  ``convert``, ``reshape``, ``transpose``, ``concatenate`` and ``all-reduce`` onto the
  ATen/c10d ops of the same meaning; the others onto the ``xla.*`` ops of
  :mod:`shardproof.ops.xla` (``dot`` is ``xla.dot_general``, ``reduce`` is ``xla.reduce``
  with the reducer it applies, ...);
* ``custom-call`` with ``custom_call_target="T"`` becomes op ``custom_call.T`` (declare
  that name, e.g. from a plug-in, to support a target), its ``backend_config`` a kwarg;
* ``fusion``/``call`` instructions are inlined (their nodes are named
  ``<instruction>/<inner instruction>``);
* reducers (``to_apply``) must be one binary op of the two parameters (add, maximum,
  minimum, multiply, and, or): another reducer makes the instruction an op of its own
  (``xla.reduce[<computation>]``) that no rule supports, so the verdict is unknown there;
* a constant whose literal is printed (``constant(1e-05)``, ``constant({1, 2})``) holds
  it; an elided one (``constant({...})``) has ``value=None`` (opaque, see
  :func:`mark_shared_constants`);
* ``metadata={source_file=... source_line=...}`` (or a ``stack_frame_id`` into the
  module's StackFrames table) is the node's source. When ``source_file`` carries a
  printed Python stack (``path\\n----\\n['f.py:12', ...]``), the innermost frame outside
  installed packages is the source and the frames around it are its ``code``.
  Every node's ``origin`` is the HLO file and line.

Malformed text raises :class:`~shardproof.frontends.fx_text.DumpError` (``file:line: ...``).
"""
from __future__ import annotations

import os
import re

from ..ir.graph import Graph, Node, Source, TensorType
from .fx_text import DumpError, read_dump
from .hlo_parse import (COMPARE, DTYPES, ELEMENTWISE, REDUCERS, _PASS_THROUGH, Computation, HloModule, Instr, _dims_attr,
                        _int_lists, _literal, _replica_groups, _source, _unquote, is_hlo_text, parse_hlo)

__all__ = ["is_hlo_text", "parse_hlo", "load_hlo_program", "HloModule", "mark_shared_constants", "DTYPES"]

# ---------------------------------------------------------------- graph building

class _Builder:
    """Builds one rank's Graph from a parsed module."""

    def __init__(self, module: HloModule, rank: int, world: int):
        self.m, self.rank, self.world = module, rank, world
        self.graph = Graph(label=f"rank {rank} ({os.path.basename(module.filename)})")
        self.names: set[str] = set()

    def err(self, ins: Instr, message: str) -> DumpError:
        return DumpError(self.m.filename, ins.line, message)

    def add(self, node: Node) -> Node:
        if node.name in self.names:
            raise DumpError(self.m.filename, node.origin.line if node.origin else None,
                            f"{node.name!r} is defined twice")
        self.names.add(node.name)
        self.graph.nodes.append(node)
        return node

    def build(self) -> Graph:
        comp = self.m.computations[self.m.entry]
        env = self.computation(comp, None, "")
        root = env[comp.root.name]
        # outputs are named by position (instruction names differ between programs)
        items = root if isinstance(root, tuple) else (root,)
        for i, item in enumerate(items):
            if isinstance(item, Node) and isinstance(item.type, TensorType):
                self.graph.outputs[f"out{i}"] = self.add(Node(f"out{i}", "aten.alias", (item,), {}, item.type,
                                                              item.source, item.origin))
        return self.graph

    def computation(self, comp: Computation, args: list | None, prefix: str) -> dict:
        """Nodes of `comp`; `args` bind its parameters (None: the entry, parameters are inputs)."""
        env: dict[str, object] = {}
        for ins in comp.instrs:
            env[ins.name] = self.instruction(ins, env, args, prefix)
        return env

    def operand(self, ins: Instr, env: dict, name: str):
        if name not in env:
            raise self.err(ins, f"{ins.name} reads {name}, which is not defined before it")
        return env[name]

    def instruction(self, ins: Instr, env: dict, args: list | None, prefix: str):
        ops = [self.operand(ins, env, o) for o in ins.operands]
        name = prefix + ins.name
        origin = Source(self.m.filename, ins.line)
        src = _source(ins, self.m)

        def node(op, nargs=(), kwargs=None, ty=ins.shape):
            return self.add(Node(name, op, tuple(nargs), dict(kwargs or {}), ty, src, origin))

        code = ins.opcode
        if code == "parameter":
            if not (ins.literal or "").isdigit():
                raise self.err(ins, f"parameter({ins.literal}) needs an index")
            idx = int(ins.literal)
            if args is None:
                return node("input")
            if not 0 <= idx < len(args):
                raise self.err(ins, f"parameter({idx}) of a computation called with {len(args)} operands")
            return args[idx]
        if code == "constant":
            value = _literal(ins.literal or "", ins.shape, self.m.filename, ins.line) \
                if isinstance(ins.shape, TensorType) else None
            return node("constant", kwargs={"value": value})
        if code == "remainder":  # XLA's remainder keeps the dividend's sign (C fmod), unlike aten.remainder
            return node("aten.fmod", ops)
        integer = isinstance(ins.shape, TensorType) and ins.shape.dtype.startswith(("i", "u"))
        if code == "divide" and integer:
            return node("aten.div", ops, {"rounding_mode": "trunc"})  # integer division rounds toward zero
        if code in ("and", "or", "not") and integer:  # on integers XLA works bit by bit
            return node(f"aten.bitwise_{code}", ops)
        if code in ELEMENTWISE:
            return node(ELEMENTWISE[code], ops)
        if code == "compare":
            direction = ins.attrs.get("direction", "")
            if direction not in COMPARE:
                raise self.err(ins, f"compare with unknown direction {direction!r}")
            return node(COMPARE[direction], ops)
        if code == "clamp":
            lo, x, hi = ops
            return node("aten.clamp", (x, lo, hi))
        if code == "convert":
            return node("xla.convert", ops, {"dtype": ins.shape.dtype})
        if code in _PASS_THROUGH:
            return ops[0] if len(ops) == 1 else tuple(ops)
        if code == "reshape":
            return node("aten.reshape", (ops[0], list(ins.shape.shape)))
        if code == "transpose":
            return node("aten.permute", (ops[0], _dims_attr(ins.attrs, "dimensions")))
        if code == "broadcast":
            return node("xla.broadcast_in_dim", (ops[0], list(ins.shape.shape), _dims_attr(ins.attrs, "dimensions")))
        if code == "concatenate":
            return node("aten.cat", (list(ops), _dims_attr(ins.attrs, "dimensions")[0]))
        if code == "slice":
            spans = re.findall(r"\[(-?\d+):(-?\d+)(?::(\d+))?\]", ins.attrs.get("slice", ""))
            if len(spans) != len(ins.shape.shape):
                raise self.err(ins, f"slice needs one [start:limit] per dim, got {ins.attrs.get('slice')!r}")
            return node("xla.slice", (ops[0], [int(a) for a, _, _ in spans], [int(b) for _, b, _ in spans],
                                      [int(c or 1) for _, _, c in spans]))
        if code == "dynamic-slice":
            return node("xla.dynamic_slice", (ops[0], list(ops[1:]), _dims_attr(ins.attrs, "dynamic_slice_sizes")))
        if code == "dynamic-update-slice":
            return node("xla.dynamic_update_slice", (ops[0], ops[1], list(ops[2:])))
        if code == "pad":
            return node("xla.pad", (ops[0], ops[1], ins.attrs.get("padding", "")))
        if code == "iota":
            return node("xla.iota", (list(ins.shape.shape), int(ins.attrs.get("iota_dimension", 0))))
        if code == "dot":
            a = ins.attrs
            return node("xla.dot_general", (ops[0], ops[1], _dims_attr(a, "lhs_batch_dims"),
                                            _dims_attr(a, "rhs_batch_dims"), _dims_attr(a, "lhs_contracting_dims"),
                                            _dims_attr(a, "rhs_contracting_dims")))
        if code == "reduce":
            kind = self.reducer(ins)
            if len(ops) != 2:
                return node(f"xla.reduce[{ins.attrs.get('to_apply', '?')}, {len(ops) // 2} operands]", ops)
            op = "xla.reduce" if kind else f"xla.reduce[{ins.attrs.get('to_apply', '?')}]"
            return node(op, (ops[0], ops[1], _dims_attr(ins.attrs, "dimensions"), kind))
        if code == "gather":
            a = ins.attrs
            return node("xla.gather", (ops[0], ops[1]), {
                "offset_dims": _dims_attr(a, "offset_dims"), "collapsed_slice_dims": _dims_attr(a, "collapsed_slice_dims"),
                "start_index_map": _dims_attr(a, "start_index_map"), "index_vector_dim": int(a.get("index_vector_dim", 0)),
                "slice_sizes": _dims_attr(a, "slice_sizes"),
                "operand_batching_dims": _dims_attr(a, "operand_batching_dims"),
                "start_indices_batching_dims": _dims_attr(a, "start_indices_batching_dims")})
        if code == "scatter":
            a = ins.attrs
            kind = self.reducer(ins) or ("replace" if self.replaces(ins) else None)
            op = "xla.scatter" if kind and len(ops) == 3 else f"xla.scatter[{a.get('to_apply', '?')}]"
            return node(op, tuple(ops), {
                "update_window_dims": _dims_attr(a, "update_window_dims"),
                "inserted_window_dims": _dims_attr(a, "inserted_window_dims"),
                "scatter_dims_to_operand_dims": _dims_attr(a, "scatter_dims_to_operand_dims"),
                "index_vector_dim": int(a.get("index_vector_dim", 0)), "kind": kind})
        if code == "tuple":  # a tuple is its elements: no node, so no false dependence between them
            return tuple(ops)
        if code == "get-tuple-element":
            index = int(ins.attrs.get("index", 0))
            if isinstance(ops[0], tuple):
                return ops[0][index]
            return node("getitem", (ops[0], index))
        if code == "custom-call":
            target = _unquote(ins.attrs.get("custom_call_target", '"?"'))
            kwargs = {"backend_config": _unquote(ins.attrs["backend_config"])} if "backend_config" in ins.attrs else {}
            return node(f"custom_call.{target}", ops, kwargs)
        if code in ("fusion", "call"):
            callee = self.callee(ins, "calls" if code == "fusion" else "to_apply")
            inner = self.computation(callee, ops, name + "/")
            return inner[callee.root.name]
        if code in ("all-reduce", "all-reduce-start"):
            kind = self.reducer(ins)
            if kind not in ("sum", "max", "min", "prod") or len(ops) != 1:
                return node(f"xla.all_reduce[{ins.attrs.get('to_apply', '?')}]", ops)
            return node("_c10d_functional.all_reduce", (ops[0], "product" if kind == "prod" else kind,
                                                        self.group(ins)))
        if code in ("all-gather", "all-gather-start"):
            return node("xla.all_gather", (ops[0], _dims_attr(ins.attrs, "dimensions")[0], self.group(ins)))
        if code == "reduce-scatter":
            kind = self.reducer(ins)
            return node("xla.reduce_scatter" if kind in ("sum", "max", "min") else "xla.reduce_scatter[?]",
                        (ops[0], kind, _dims_attr(ins.attrs, "dimensions")[0], self.group(ins)))
        if code == "all-to-all":
            dims = _dims_attr(ins.attrs, "dimensions")
            if len(ops) != 1 or len(dims) != 1:
                return node("xla.all_to_all[tuple]", ops)
            return node("xla.all_to_all", (ops[0], dims[0], dims[0], self.group(ins)))
        if code in ("collective-permute", "collective-permute-start"):
            pairs = [tuple(p) for p in _int_lists(ins.attrs.get("source_target_pairs", "")[1:-1])]
            return node("xla.collective_permute", (ops[0], pairs, tuple(range(self.world))))
        if code in ("all-reduce-done", "all-gather-done", "collective-permute-done"):
            return ops[0]
        return node(f"hlo.{code}", ops, {k: v for k, v in ins.attrs.items() if k != "metadata"})

    def callee(self, ins: Instr, key: str) -> Computation:
        target = ins.attrs.get(key, "").lstrip("%")
        if target not in self.m.computations:
            raise self.err(ins, f"{ins.name} calls computation {target or '?'}, which the module does not define")
        return self.m.computations[target]

    def reducer(self, ins: Instr) -> str | None:
        """The reduction a ``to_apply`` computation applies, when it is one binary op of its
        two parameters (in either order); else None."""
        if "to_apply" not in ins.attrs:
            return None
        comp = self.callee(ins, "to_apply")
        root = comp.root
        params = {i.name for i in comp.instrs if i.opcode == "parameter"}
        if len(comp.instrs) != 3 or len(params) != 2 or set(root.operands) != params:
            return None
        return REDUCERS.get(root.opcode)

    def replaces(self, ins: Instr) -> bool:
        """A scatter whose update computation returns its second parameter (a plain write)."""
        comp = self.callee(ins, "to_apply")
        params = [i for i in comp.instrs if i.opcode == "parameter"]
        root = comp.root
        return root.opcode == "parameter" and root.literal is not None and root.literal.strip() == "1" and len(params) == 2

    def group(self, ins: Instr) -> tuple:
        groups = _replica_groups(ins.attrs.get("replica_groups"), self.world, self.m.filename, ins.line)
        if not groups:
            return tuple(range(self.world))
        mine = [g for g in groups if self.rank in g]
        if len(mine) != 1:
            raise self.err(ins, f"replica_groups={ins.attrs['replica_groups']} do not place rank {self.rank} of "
                                f"{self.world} in exactly one group")
        return tuple(mine[0])


def instantiate(module: HloModule, rank: int, world: int) -> Graph:
    """One rank's Graph (collective groups resolved for `rank` of `world`)."""
    b = _Builder(module, rank, world)
    try:
        return b.build()
    except DumpError:
        raise
    except Exception as exc:  # never let malformed text escape as anything else
        raise DumpError(module.filename, None, f"cannot import: {type(exc).__name__}: {exc}") from exc


def load_hlo_program(path_or_text, world_size: int | None = None, *, filename: str | None = None) -> list[Graph]:
    """Read an HLO module (a path, or the text with `filename`) and instantiate it once per
    rank. The rank count is `world_size`, else the ranks the replica groups name (one rank
    when the module has no collective groups)."""
    if filename is None:
        filename = os.fspath(path_or_text)
        text = read_dump(filename)
    else:
        text = path_or_text
    try:
        module = parse_hlo(text, filename)
    except DumpError:
        raise
    except Exception as exc:
        raise DumpError(filename, None, f"cannot parse: {type(exc).__name__}: {exc}") from exc
    spans = module.group_size()
    world = world_size or spans or 1
    if spans and spans > world:
        raise DumpError(filename, None, f"the replica groups name {spans} ranks, but the world size is {world}")
    return [instantiate(module, r, world) for r in range(world)]


def mark_shared_constants(graphs: list[Graph], names) -> set[str]:
    """Elided constants (``constant({...})``) named in `names` hold the same unprinted value
    in every program they appear in: they get kwarg ``shared=<name>`` (one opaque term for
    all). Returns the names found."""
    found = set()
    for g in graphs:
        for n in g.nodes:
            if n.op == "constant" and n.kwargs.get("value") is None and n.name in names:
                n.kwargs["shared"] = n.name
                found.add(n.name)
    return found
