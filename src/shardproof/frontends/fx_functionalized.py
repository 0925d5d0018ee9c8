"""The ``auto_functionalized`` higher-order op of a dump (mutating custom ops), v1 and v2,
read into one convention (see :mod:`shardproof.frontends.fx_text`): a mixin of its parser."""
from __future__ import annotations

import ast
import re
from dataclasses import replace

from ..ir.graph import Node, TensorType, contiguous_strides
from .fx_syntax import dotted_name as _dotted, torch_op_name as _torch_op_name

_V2_VIEW_SUFFIXES = ("_base_index", "_alias", "_slice_dim", "_slice_start", "_slice_end", "_size", "_stride",
                     "_storage_offset")

class AutoFunctionalized:
    """Parser methods for ``auto_functionalized`` nodes; the parser provides ``add``,
    ``fresh``, ``err``, ``value``, ``kwargs_of``, ``src`` and ``set_output_type``."""

    def auto_functionalized(self, name: str, call: ast.Call, ann_type, v2: bool) -> Node:
        if not call.args:
            raise self.err("auto_functionalized without the op it wraps")
        target = _dotted(call.args[0])
        op = _torch_op_name(target) if target else None
        if op is None:
            raise self.err(f"auto_functionalized of {ast.unparse(call.args[0])!r}: expected torch.ops.NS.OP")
        if len(call.args) > 1:
            raise self.err("auto_functionalized takes the op's arguments as keywords only")
        kwargs = self.kwargs_of(call)
        for k in ("_only_clone_these_tensors", "_only_clone_these_bases"):
            kwargs.pop(k, None)
        if not v2:
            return self.add(Node(name, op, (), kwargs, None, self.src))
        bases = kwargs.pop("_all_bases", [])
        if not isinstance(bases, (list, tuple)) or not all(isinstance(b, Node) for b in bases):
            raise self.err(f"auto_functionalized_v2: _all_bases must be a list of nodes, got {bases!r}")
        lists = [k[1:-len("_length")] for k in kwargs if k.startswith("_") and k.endswith("_length")]
        elem_re = re.compile("^(?:" + "|".join(re.escape(l) for l in lists) + r")_\d+$") if lists else None
        names: list[str] = []  # mutable arguments, in schema (= printed) order
        meta: set[str] = set()
        for k in kwargs:
            if k.startswith("_") and k.endswith("_length") and k[1:-len("_length")] in lists:
                names.append(k[1:-len("_length")])
                meta.add(k)
            elif k.startswith("_") and k.endswith("_base_index"):
                m = k[1:-len("_base_index")]
                if elem_re is None or not elem_re.match(m):
                    names.append(m)
        prefixes = [f"_{m}" for m in names if m not in lists]
        for l in lists:
            n = kwargs.get(f"_{l}_length")
            prefixes += [f"_{l}_{i}" for i in range(n if isinstance(n, int) else 0)]
        for pre in prefixes:
            meta.update(pre + s for s in _V2_VIEW_SUFFIXES)
        op_kwargs = {k: v for k, v in kwargs.items() if k not in meta}
        node = Node(name, op, (), op_kwargs, None, self.src)
        mutations: dict[int, list] = {}  # base index -> [(output index, element index or None, view)]
        for k, m in enumerate(names):
            if m in lists:
                n = kwargs.get(f"_{m}_length")
                if n is None:
                    op_kwargs[m] = None
                    continue
                elems = []
                for i in range(int(n)):
                    view = self.v2_view(kwargs, f"_{m}_{i}", bases, m)
                    elems.append(view)
                    if view is not None:
                        mutations.setdefault(view["base"], []).append((1 + k, i, view))
                op_kwargs[m] = [None if v is None else v["value"] for v in elems]
            else:
                view = self.v2_view(kwargs, f"_{m}", bases, m)
                if view is None:
                    op_kwargs[m] = None
                    continue
                op_kwargs[m] = view["value"]
                mutations.setdefault(view["base"], []).append((1 + k, None, view))
        self.add(node)  # after the synthetic view nodes v2_view added
        node.type = tuple([None] + [None] * len(names))
        for k, m in enumerate(names):
            v = op_kwargs.get(m)
            if isinstance(v, Node):
                node.type = node.type[:1 + k] + (v.type,) + node.type[2 + k:]
        self.v2[node] = {"bases": list(bases), "mutations": mutations}
        return node

    def v2_view(self, kwargs: dict, prefix: str, bases: list, arg: str):
        idx = kwargs.get(f"{prefix}_base_index")
        if idx is None:
            return None
        if not isinstance(idx, int) or not 0 <= idx < len(bases):
            raise self.err(f"auto_functionalized_v2: {prefix}_base_index={idx!r} is not an index into _all_bases")
        base = bases[idx]
        if kwargs.get(f"{prefix}_slice_dim") is not None or f"{prefix}_slice_dim" in kwargs:
            dim, start, end = (kwargs.get(f"{prefix}_slice_{s}") for s in ("dim", "start", "end"))
            ty = None
            if isinstance(base.type, TensorType) and isinstance(dim, int) and -len(base.shape) <= dim < len(
                    base.shape) and all(v is None or type(v) is int for v in (start, end)):
                shape = list(base.shape)
                shape[dim] = len(range(*slice(start, end).indices(shape[dim])))
                ty = TensorType(tuple(shape), base.type.dtype)
            view = self.add(Node(self.fresh(f"{self.current}.{arg}"), "aten.slice", (base, dim, start, end), {}, ty,
                                 self.src))
            return {"base": idx, "value": view, "node": view, "kind": "slice", "params": (dim, start, end)}
        if f"{prefix}_storage_offset" in kwargs:
            size, stride, off = (kwargs.get(f"{prefix}_{s}") for s in ("size", "stride", "storage_offset"))
            if isinstance(base.type, TensorType) and base.type.strides is None:
                # dumps print no strides; a functionalization base owns its storage: contiguous from offset 0
                base.type = replace(base.type, strides=tuple(contiguous_strides(base.type.shape)), offset=0)
            ty = TensorType(tuple(size), base.type.dtype) if isinstance(base.type, TensorType) and isinstance(
                size, (list, tuple)) and all(isinstance(s, int) for s in size) else None
            view = self.add(Node(self.fresh(f"{self.current}.{arg}"), "aten.as_strided", (base, size, stride, off), {},
                                 ty, self.src))
            return {"base": idx, "value": view, "node": view, "kind": "as_strided", "params": (size, stride, off)}
        # the base itself, or an alias of it (_x_alias=True): same values
        return {"base": idx, "value": base, "node": None, "kind": "whole", "params": ()}

    def v2_getitem(self, name: str, producer: Node, index: int, ann_type) -> Node:
        info = self.v2[producer]
        if index == 0:
            node = self.add(Node(name, "getitem", (producer, 0), {}, ann_type, self.src))
            self.set_output_type(producer, 0, ann_type)
            return node
        j = index - 1
        if not 0 <= j < len(info["bases"]):
            raise self.err(f"{producer.name}[{index}]: auto_functionalized_v2 has {len(info['bases'])} bases")
        muts = info["mutations"].get(j, [])
        if not muts:  # a base no argument mutates: unchanged
            raise self.err(f"{producer.name}[{index}]: no argument of {producer.op} mutates base {j}")
        if len(muts) == 1 and muts[0][2]["kind"] == "whole":
            out, elem, _ = muts[0]
            if elem is None:
                node = self.add(Node(name, "getitem", (producer, out), {}, ann_type, self.src))
                if ann_type is not None:
                    self.set_output_type(producer, out, ann_type)
                return node
            lst = self.add(Node(self.fresh(f"{name}.list"), "getitem", (producer, out), {}, None, self.src))
            return self.add(Node(name, "getitem", (lst, elem), {}, ann_type, self.src))
        cur = info["bases"][j]
        for i, (out, elem, view) in enumerate(muts):
            new = self.add(Node(self.fresh(f"{name}.arg{out}"), "getitem", (producer, out), {},
                                view["value"].type if elem is None else None, self.src))
            if elem is not None:
                new = self.add(Node(self.fresh(f"{name}.arg{out}_{elem}"), "getitem", (new, elem), {},
                                    view["value"].type, self.src))
            last = i == len(muts) - 1
            nm = name if last else self.fresh(f"{name}.scatter{i}")
            ty = ann_type if last else cur.type
            if view["kind"] == "whole":
                cur = new if not last else self.add(Node(nm, "aten.alias", (new,), {}, ty, self.src))
            elif view["kind"] == "slice":
                cur = self.add(Node(nm, "aten.slice_scatter", (cur, new, *view["params"]), {}, ty, self.src))
            else:
                cur = self.add(Node(nm, "aten.as_strided_scatter", (cur, new, *view["params"]), {}, ty, self.src))
        return cur

