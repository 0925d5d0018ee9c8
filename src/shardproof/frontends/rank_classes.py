"""Rank classes (issue 16, symmetry): ranks whose programs are one program up to their
process groups are captured once; the others' graphs are derived from it.

Class membership is decided soundly, per rank, from a cheap eager run of the rank's own
step (no make_fx, no functionalization) under a dispatch mode that records every ATen op
it runs: the op, its scalar arguments, where each tensor argument came from (an input by
position, an earlier op's output by number, or -- a tensor made outside the dispatcher,
e.g. ``torch.tensor(2.0)`` -- its shape, dtype, strides and values), and the microbatch it
ran for; with the inputs' names, shapes, dtypes and strides and the outputs' names. Only
the *group* argument of a collective is abstracted (kept aside, in order): two ranks whose
records are equal but for those groups trace to the same graph but for the groups, so a
member's graph is its representative's with the member's own groups substituted, in order,
and the member's own input values and storage layouts. A rank whose record differs anywhere
(an ``if rank == 3:`` branch, a rank-specific scalar, another microbatch loop) is its own
class and is captured fully. (A derived node keeps its representative's source line.)

Programs this does not cover are captured rank by rank as before: DTensor or FSDP state,
async collectives, point-to-point ops, capture defects, an eager run that fails.
"""
from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
from torch.fx import traceback as fx_traceback
from torch.utils._python_dispatch import TorchDispatchMode

from ..ir.graph import Graph, Node
from .torch_capture import _op_name, _with_storage, fake_world, group_ranks
from .torch_collectives import ASYNC_ISSUED, COLLECTIVE_PREFIXES, functional_collectives
from .torch_p2p import PIPELINE_META, recording as p2p_recording

@dataclass
class Fingerprint:
    """A rank's eager record: `key` (the program with its groups abstracted), `groups` (each
    collective's global ranks, in program order), the step's input values and their storage
    layouts, and one key per microbatch (:func:`microbatch_classes`)."""
    key: str
    groups: list
    inputs: dict
    layouts: tuple
    microbatches: dict = field(default_factory=dict)
    loop: object = None  # the same eager run's microbatch loop record (frontends/microbatches.py: LoopRecord)


def _layout(t) -> tuple:
    return tuple(t.stride()), int(t.storage_offset()), t.untyped_storage().nbytes()


class OpRecord(TorchDispatchMode):
    """Records every op run under it (see the module doc); tensors it saw are kept alive so
    that their ids are not reused."""

    def __init__(self, inputs: list):
        super().__init__()
        self._ids = {id(t): -1 - i for i, t in enumerate(inputs)}
        self._keep = list(inputs)
        self._hash = hashlib.blake2b(digest_size=20)
        self._mb_hash: dict = {}
        self._mb_start: dict = {}
        self._tensors = 0  # outputs seen so far (each output's id is its number)
        self.groups: list = []

    def _ref(self, t, start):
        ref = self._ids.get(id(t))
        if ref is None:  # made outside the dispatcher: its values are part of the program
            value = t.detach().cpu().contiguous()
            data = (value.float() if value.dtype == torch.bfloat16 else value).numpy().tobytes()
            return ("value", tuple(t.shape), str(t.dtype), tuple(t.stride()),
                    hashlib.blake2b(data, digest_size=12).hexdigest())
        if start is None or ref < 0:  # inputs are -1 - position; ops' outputs by number
            return ref
        return ref - start if ref >= start else "outer"  # within a microbatch: its own tensors by position

    def _arg(self, a, start):
        return walk_args(a, lambda t: self._ref(t, start))

    def _call(self, func, args, kwargs):
        """Run the op: (its output, its name, its args with a collective's group abstracted
        and kept aside)."""
        out = func(*args, **kwargs)
        op = _op_name(func)
        if op.startswith(COLLECTIVE_PREFIXES) and args and isinstance(args[-1], str):
            self.groups.append(group_ranks(args[-1]))
            args = args[:-1] + ("<group>",)
        elif op.startswith(OPAQUE_CALLS) and args and isinstance(args[-1], (list, tuple)):
            self.groups.append(tuple(args[-1]))  # an opaque layer call's group: its global ranks
            args = args[:-1] + ("<group>",)
        return out, op, args

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out, op, args = self._call(func, args, kwargs)
        self._note(op, args, kwargs, out, _current_microbatch())
        return out

    def _note(self, op, args, kwargs, out, mb) -> None:
        """Hash the op into the record (and its microbatch's), number its tensor outputs."""
        if mb is not None and mb not in self._mb_start:
            self._mb_start[mb] = self._tensors
            self._mb_hash[mb] = hashlib.blake2b(digest_size=20)
        self._hash.update(repr((op, self._arg(args, None), self._arg(kwargs, None), mb)).encode())
        if mb is not None:
            start = self._mb_start[mb]
            self._mb_hash[mb].update(repr((op, self._arg(args, start), self._arg(kwargs, start))).encode())
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self._ids[id(t)] = self._tensors
                self._tensors += 1
                self._keep.append(t)

    def key(self) -> str:
        return self._hash.hexdigest()

    def microbatch_keys(self) -> dict:
        return {mb: h.hexdigest() for mb, h in self._mb_hash.items()}


_SCALARS = (bool, int, float, complex, str, type(None))


def walk_args(a, ref: Callable):
    """An op's argument as a hashable record: tensors as `ref(tensor)`, containers walked,
    scalars as themselves, anything else by its string (dtypes, devices, layouts)."""
    if isinstance(a, torch.Tensor):
        return ref(a)
    if isinstance(a, (list, tuple)):
        if all(type(x) in _SCALARS for x in a):  # sizes, dims: no walk per element
            return tuple(a)
        return tuple([walk_args(x, ref) for x in a])
    if isinstance(a, dict):
        return tuple([(k, walk_args(v, ref)) for k, v in a.items()])
    if a is None or isinstance(a, (bool, int, float, complex, str)):
        return a
    return str(a)  # dtypes, devices, layouts, memory formats


def _current_microbatch():
    where = (fx_traceback.current_meta.get("custom") or {}).get(PIPELINE_META)
    return where[1] if isinstance(where, tuple) and where[0] is None else None


def plain_step(make_program: Callable, rank: int, world: int, data: dict, train):
    """``(program, flat_fn, inputs, output names, input values)`` of rank `rank`'s step, inside
    its fake world; None where it is not one the eager records cover (no ``train_step``,
    DTensor or FSDP state). Raises what building the program raises."""
    from .torch_fsdp import fsdp_params
    from .torch_train import step_function
    program = make_program(rank, world)
    if not callable(getattr(program, "train_step", None)) or fsdp_params(program):
        return None
    flat_fn, inputs, outputs, _, specs = step_function(program, data, train, lambda m, *a: m.train_step(*a))
    if specs:
        return None
    return program, flat_fn, inputs, outputs, [v.detach() if isinstance(v, torch.Tensor) else v for v in inputs.values()]


def fingerprint_step(make_program: Callable, rank: int, world: int, data: dict, train,
                     routed: bool = False, loop: Callable | None = None) -> Fingerprint | None:
    """Rank `rank`'s eager record (None where the program is not one this covers, or its
    eager run fails: it is then captured fully, which reports any error). `routed`: the
    caller holds :func:`functional_collectives` already (entering it scans every module).
    `loop(values)`: an OpRecord that also records the microbatch loop (microbatches.py), whose
    ``finish(...)`` becomes ``Fingerprint.loop``: one eager run serves both."""
    with fake_world(rank, world):
        try:
            step = plain_step(make_program, rank, world, data, train)
            if step is None:
                return None
            program, flat_fn, inputs, outputs, values = step
            issued = ASYNC_ISSUED[0]
            record = (loop or OpRecord)(values)
            with contextlib.nullcontext() if routed else functional_collectives(), p2p_recording() as events, \
                    fx_traceback.preserve_node_meta(), record:
                outs = flat_fn(*values)
        except Exception:  # noqa: BLE001  (the full capture reports it)
            return None
        if ASYNC_ISSUED[0] > issued or any(getattr(e, "peer", None) is not None for e in events):
            return None
    signature = tuple((n, tuple(v.shape), str(v.dtype), tuple(v.stride())) for n, v in inputs.items()) + (tuple(outputs),)
    key = hashlib.blake2b(repr((signature, record.key())).encode(), digest_size=20).hexdigest()
    layouts = tuple(_layout(v) for v in inputs.values())
    return Fingerprint(key, record.groups, dict(zip(inputs, values)), layouts, record.microbatch_keys(),
                       record.finish(inputs, outputs, outs, events, program) if loop else None)


def derivable(graph: Graph, fp: Fingerprint) -> bool:
    """Whether `graph` (the representative's capture) can stand for its class: its collective
    nodes' groups are its record's, in order, and nothing rank-specific beyond them was
    recorded at capture (point-to-point events, defects)."""
    groups = [tuple(n.args[-1]) for n in _collectives(graph)]
    events = getattr(graph.events, "events", None) or []
    return groups == fp.groups and not any(n.defects for n in graph.nodes) and not any(
        getattr(e, "peer", None) is not None for e in events)


OPAQUE_CALLS = ("shardproof_blocks.",)
"""Ops that take their group as a list of global ranks (frontends/torch_block_calls.py)."""


def _collectives(graph: Graph) -> list:
    return [n for n in graph.nodes if n.args and (n.op.startswith(COLLECTIVE_PREFIXES) and isinstance(n.args[-1], tuple)
                                                   or n.op.startswith(OPAQUE_CALLS) and isinstance(n.args[-1], (list, tuple)))]


def _remap(value, env):
    if isinstance(value, Node):
        return env[value.name]
    if isinstance(value, (list, tuple)):
        return type(value)(_remap(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _remap(v, env) for k, v in value.items()}
    return value


def derive_graph(rep: Graph, rep_fp: Fingerprint, gm, fp: Fingerprint, rank: int, plain: dict | None = None) -> Graph:
    """Rank `rank`'s graph from its representative's: the same nodes with the rank's own
    collective groups (in order) and, where its inputs lie otherwise in storage, the layouts
    of a meta run of the representative's traced module on the rank's inputs. `plain`: node
    name -> its type without a layout, shared by the class's members (built once)."""
    plain = {} if plain is None else plain
    groups = {n.name: g for n, g in zip(_collectives(rep), fp.groups)}
    layouts = None
    if fp.layouts != rep_fp.layouts:
        layouts = _layouts(rep, gm, fp)
    env: dict = {}
    nodes = []
    for n in rep.nodes:
        args = _remap(n.args, env)
        if n.name in groups:
            args = args[:-1] + (groups[n.name],)
        if layouts is None:
            ty = n.type
        else:
            bare = plain.get(n.name)
            if bare is None:
                bare = plain[n.name] = _plain(n.type)
            ty = _with_storage(bare, layouts.get(n.name))
        new = object.__new__(Node)  # dataclasses.replace without re-running __init__ (every field copied)
        new.__dict__.update(n.__dict__, args=args, kwargs=_remap(n.kwargs, env), type=ty)
        env[n.name] = new
        nodes.append(new)
    return Graph(nodes=nodes, outputs={k: env[v.name] for k, v in rep.outputs.items()}, label=f"rank {rank}",
                 stated=dict(rep.stated), stated_inputs=dict(rep.stated_inputs), positions=dict(rep.positions))


def derive_events(rep: Graph, graph: Graph, rank: int):
    """The representative's program-order events as rank `rank`'s: each collective issue with
    the group of its node in `graph` (the derived graph); None where an issue names no node."""
    from ..ir.events import ISSUE
    traced = getattr(rep.events, "events", None)
    if traced is None:
        return None
    by_name = {n.name: n.args[-1] for n in _collectives(graph)}
    out = []
    for e in traced:
        if e.kind == ISSUE and e.peer is None:
            if e.node not in by_name:
                return None
            e = replace(e, ranks=tuple(by_name[e.node]), group=",".join(map(str, by_name[e.node])))
        out.append(replace(e, rank=rank))
    return replace(rep.events, rank=rank, events=out, notes=list(rep.events.notes))


def _layouts(rep: Graph, gm, fp: Fingerprint) -> dict:
    """Node name -> (strides, offset) of the rank's graph, whose inputs lie otherwise in
    storage than the representative's (a dp rank's batch slice: another offset). Only the
    ``as_strided`` family reads a layout (ops/strided.py): where the graph has one, a meta run
    of the traced module on the rank's inputs gives every node's; else the inputs' own are
    kept and the others' left unknown (None: a rule needing one would say so)."""
    if any("as_strided" in n.op for n in rep.nodes):
        from .meta_layouts import meta_layouts
        by_fx = meta_layouts(gm, list(fp.inputs.values())) or {}
        fx_nodes = [n for n in gm.graph.nodes if n.op != "output"]  # from_fx: one IR node per fx node
        return {n.name: by_fx.get(f) for n, f in zip(rep.nodes, fx_nodes)} if len(fx_nodes) == len(rep.nodes) else {}
    return {n.name: (lay[0], lay[1]) for n, lay in zip(rep.inputs, fp.layouts)}


def _plain(ty):
    """A type without its layout (the meta run gives the derived graph's)."""
    if isinstance(ty, tuple):
        return ty
    return replace(ty, strides=None, offset=None) if ty is not None and hasattr(ty, "strides") else ty


def classes_of(fingerprints: list) -> list[list[int]]:
    """Ranks grouped by equal records, in rank order; a rank without a record is alone."""
    by_key: dict = {}
    out: list = []
    for rank, fp in enumerate(fingerprints):
        if fp is None:
            out.append([rank])
            continue
        if fp.key not in by_key:
            by_key[fp.key] = len(out)
            out.append([])
        out[by_key[fp.key]].append(rank)
    return out


def microbatch_classes(fp: Fingerprint | None) -> list[list[int]]:
    """A rank's microbatches grouped by equal per-microbatch records (tensors made in the
    microbatch by position in it; inputs and earlier tensors as themselves)."""
    if fp is None or not fp.microbatches:
        return []
    by_key: dict = {}
    for mb in sorted(fp.microbatches):
        by_key.setdefault(fp.microbatches[mb], []).append(mb)
    return sorted(by_key.values())
