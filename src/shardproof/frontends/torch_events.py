"""Program-order events of one rank, recorded while its program runs eagerly on the fake
process group (values do not matter; a make_fx graph makes every collective synchronous
and has no node for ``Work.wait()``).

Recorded: each ``torch.distributed`` collective and P2P op as it is issued (sync or
``async_op=True``, ``isend``/``irecv``, ``batch_isend_irecv``) with its group, peer, tag
and buffers (storage and byte range), ``Work.wait()`` on its handle, the functional
collectives (``_c10d_functional``) as synchronous issues, and -- through a
``TorchDispatchMode`` -- every read and write of storage by ordinary ops (in-place and
``out=`` writes included) while an async op that touches that storage is in flight. Each
event keeps the innermost user source line.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.utils._python_dispatch import TorchDispatchMode

from ..ir.events import ACCESS, ISSUE, RELEASE, SAVE, WAIT, Buffer, Event, RankEvents, signature
from .torch_capture import innermost_user_frame
from .torch_collectives import COLLECTIVE_PREFIXES

_EXACT_ELEMENTS = 1 << 16  # non-contiguous tensors up to this many elements get exact element sets

# op -> (argument names read, argument names written, root argument, peer argument)
_OPS: dict[str, tuple] = {
    "all_reduce": (("tensor",), ("tensor",), None),
    "broadcast": (("tensor",), ("tensor",), "src"),
    "reduce": (("tensor",), ("tensor",), "dst"),
    "all_gather_into_tensor": (("input_tensor",), ("output_tensor",), None),
    "all_gather": (("tensor",), ("tensor_list",), None),
    "reduce_scatter_tensor": (("input",), ("output",), None),
    "reduce_scatter": (("input_list",), ("output",), None),
    "all_to_all_single": (("input",), ("output",), None),
    "all_to_all": (("input_tensor_list",), ("output_tensor_list",), None),
    "scatter": (("scatter_list",), ("tensor",), "src"),
    "gather": (("tensor",), ("gather_list",), "dst"),
    "barrier": ((), (), None),
    "send": (("tensor",), (), "dst"),
    "isend": (("tensor",), (), "dst"),
    "recv": ((), ("tensor",), "src"),
    "irecv": ((), ("tensor",), "src"),
}
_P2P = {"send", "isend", "recv", "irecv"}
_COLLECTIVE_OPS = frozenset(_OPS) - _P2P - {"barrier"} | {"broadcast", "all_gather_single", "reduce_scatter_single"}
_ALWAYS_ASYNC = {"isend", "irecv"}


def _dtype(t) -> str:
    from .torch_capture import DTYPES
    return DTYPES.get(t.dtype, str(t.dtype))


def buffer_of(t) -> Buffer | None:
    """The bytes of its storage that tensor `t` covers; None for tensors without one
    (a wrapper subclass such as DTensor, an empty tensor)."""
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    try:
        storage = t.untyped_storage().data_ptr()
        size, stride, offset = t.shape, t.stride(), t.storage_offset()
    except Exception:  # noqa: BLE001  (no storage: subclasses, fake or meta tensors)
        return None
    item = t.element_size()
    if storage == 0 or any(s < 0 for s in stride):  # no data (meta), or a layout not modelled
        return None
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    start, stop = offset * item, (last + 1) * item
    elements = None
    if not t.is_contiguous() and t.numel() <= _EXACT_ELEMENTS:
        idx = torch.zeros((), dtype=torch.int64) + offset
        for n, s in zip(size, stride):
            idx = idx.unsqueeze(-1) + torch.arange(n, dtype=torch.int64) * s
        elements = frozenset((idx.reshape(-1) * item).tolist())
    return Buffer(storage, start, stop, item, elements)


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _buffers(values) -> tuple:
    return tuple(b for b in (buffer_of(t) for t in _tensors(values)) if b is not None)


def _line() -> str | None:
    f = innermost_user_frame()
    return f"{f.filename}:{f.lineno} in {f.name}" if f else None


def _group(group):
    g = group or dist.group.WORLD
    return g, g.group_name, tuple(dist.get_process_group_ranks(g))


class _Handle:
    """The ``Work`` an async op returns, recording its ``wait()``; everything else is the real work's."""

    def __init__(self, recorder: "Recorder", work, handle: int):
        self._recorder, self._work, self._handle = recorder, work, handle

    def wait(self, *args, **kwargs):
        self._recorder.waited(self._handle)
        return self._work.wait(*args, **kwargs) if self._work is not None else True

    def get_future(self):
        """The work's future, whose ``wait()`` is this work's wait."""
        return _Handle(self._recorder, self._work.get_future() if self._work is not None else None, self._handle)

    def __getattr__(self, name):
        return getattr(self._work, name)


class Recorder:
    """Collects one rank's events (see the module doc)."""

    def __init__(self, rank: int, saved: bool = False):
        self.out = RankEvents(rank)
        self.track_saved = saved  # follow what autograd saves (a training step: its backward runs)
        self.quiet = 0  # >0 while inside a recorded c10d call (its own ops are not the user's)
        self.inflight: dict[int, tuple] = {}  # handle -> the async op's buffers
        self.keep: list = []  # tensors of issued ops stay alive, so storage addresses stay unique
        self._params = {name: tuple(inspect.signature(getattr(c10d, name)).parameters) for name in _OPS
                        if hasattr(c10d, name)}
        self._handles = 0
        self.communicated: set = set()  # storages a c10d op has read or written
        self._saves = 0
        self.saved_live: set = set()  # numbers of the saved tensors whose backward has not run

    def _add(self, kind: str, **fields) -> Event:
        e = Event(rank=self.out.rank, index=len(self.out.events), kind=kind, line=fields.pop("line", None) or _line(), **fields)
        self.out.events.append(e)
        return e

    def issue(self, op: str, args: dict, async_op: bool) -> int | None:
        reads_from, writes_from, root = _OPS[op]
        reads = tuple(b for name in reads_from for b in _buffers(args.get(name)))
        writes = tuple(b for name in writes_from for b in _buffers(args.get(name)))
        for name in reads_from + writes_from:
            self.keep.extend(_tensors(args.get(name)))
        self.communicated.update(b.storage for b in reads + writes)
        g, name, ranks = _group(args.get("group"))
        peer = tag = None
        if op in _P2P:
            peer = args.get(root)
            if peer is None and args.get("group_" + root) is not None:
                peer = dist.get_global_rank(g, args["group_" + root])
            tag = args.get("tag") or 0
            if peer is None:
                self.out.notes.append(f"{op} without a peer (any source) at {_line()}: the order across ranks "
                                      f"is not checked")
                self.out.ordered = False
        first = (_tensors(args.get(reads_from[0] if reads_from else writes_from[0])) if reads_from or writes_from
                 else [])
        reduce = _reduce(args.get("op", dist.ReduceOp.SUM)) if "op" in self._params.get(op, ()) else None
        sig = signature(op, reduce, _dtype(first[0]) if first else None,
                        first[0].numel() if first else None)
        handle = None
        if async_op:
            self._handles += 1
            handle = self._handles
            self.inflight[handle] = reads + writes
        self._add(ISSUE, op=op, group=name, peer=peer, tag=tag or 0, handle=handle,
                  reads=reads, writes=writes, async_op=async_op, ranks=ranks, signature=sig)
        return handle

    def functional(self, op: str, args: tuple) -> None:
        name = next((a for a in reversed(args) if isinstance(a, str)), None)
        if name is None:
            return
        from .torch_capture import group_ranks
        reads = _buffers(args[0])
        first = _tensors(args[0])
        sig = signature(op, _functional_reduce(args, name), _dtype(first[0]) if first else None,
                        first[0].numel() if first else None)
        self._add(ISSUE, op=op, group=name, reads=reads, ranks=group_ranks(name), signature=sig)

    def pack(self, t):
        """autograd saves `t` for backward: a SAVE event where a c10d op has used its storage
        (a receive buffer the forward reads); what the hook keeps is (number, t)."""
        try:
            ours = not self.quiet and t.untyped_storage().data_ptr() in self.communicated
        except Exception:  # noqa: BLE001  (no storage: subclasses)
            ours = False
        buf = buffer_of(t) if ours else None
        if buf is None:
            return None, t
        self._saves += 1
        self.saved_live.add(self._saves)
        self.keep.append(t)
        self._add(SAVE, op="saved for backward", reads=(buf,), handle=self._saves)
        return self._saves, t

    def unpack(self, packed):
        number, t = packed
        if number in self.saved_live:
            self.saved_live.discard(number)
            self._add(RELEASE, op="used by backward", handle=number)
        return t

    def waited(self, handle: int) -> None:
        self.inflight.pop(handle, None)
        self._add(WAIT, op="wait", handle=handle)

    def access(self, op: str, reads: tuple, writes: tuple, line: str | None = None) -> None:
        """An ordinary op's access, kept where it touches a storage an async op has in flight."""
        live = {b.storage for bufs in self.inflight.values() for b in bufs}
        reads = tuple(b for b in reads if b.storage in live)
        writes = tuple(b for b in writes if b.storage in live)
        if reads or writes:
            self._add(ACCESS, op=op, reads=reads, writes=writes, line=line)


def _functional_reduce(args, group: str) -> str | None:
    return args[1] if len(args) > 1 and isinstance(args[1], str) and args[1] != group else None


def _reduce(op) -> str | None:
    if op is None:
        return None
    name = getattr(op, "name", None) or str(getattr(op, "op", op)).split(".")[-1]
    return str(name).lower()


def _wrap(recorder: Recorder, name: str, original: Callable) -> Callable:
    sig = inspect.signature(original)

    def recorded(*args, **kwargs):
        if recorder.quiet:
            return original(*args, **kwargs)
        bound = sig.bind_partial(*args, **kwargs)
        async_op = name in _ALWAYS_ASYNC or bool(bound.arguments.get("async_op"))
        handle = recorder.issue(name, dict(bound.arguments), async_op)
        recorder.quiet += 1
        try:
            work = original(*args, **kwargs)
        finally:
            recorder.quiet -= 1
        return _Handle(recorder, work, handle) if handle is not None else work
    return functools.wraps(original)(recorded)


def _wrap_batch(recorder: Recorder, original: Callable) -> Callable:
    def batch_isend_irecv(p2p_op_list):
        handles = []
        for p in p2p_op_list:
            name = "isend" if getattr(p.op, "__name__", "") in ("isend", "send") else "irecv"
            args = {"tensor": p.tensor, "group": p.group, "tag": p.tag,
                    ("dst" if name == "isend" else "src"): p.peer}
            if getattr(p, "group_peer", None) is not None and p.peer is None:
                args["group_" + ("dst" if name == "isend" else "src")] = p.group_peer
            handles.append(recorder.issue(name, args, True))
        recorder.quiet += 1
        try:
            works = original(p2p_op_list)
        finally:
            recorder.quiet -= 1
        works = list(works or [])
        if len(works) != len(handles):  # one work for the whole batch (coalesced)
            return [_Batch(recorder, works, handles)]
        return [_Handle(recorder, w, h) for w, h in zip(works, handles)]
    batch_isend_irecv.__wrapped__ = original
    return batch_isend_irecv


class _Batch:
    def __init__(self, recorder, works, handles):
        self._recorder, self._works, self._handles = recorder, works, handles

    def wait(self, *args, **kwargs):
        for h in self._handles:
            self._recorder.waited(h)
        for w in self._works:
            w.wait(*args, **kwargs)
        return True


class _Accesses(TorchDispatchMode):
    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        r = self.recorder
        if r.quiet:
            return out
        namespace = func.namespace
        if namespace == "_c10d_functional":
            if func._opname != "wait_tensor":
                r.functional(func._opname, tuple(args))
        elif namespace == "c10d":
            r.out.notes.append(f"c10d.{func._opname} issued outside torch.distributed's API at {_line()}: "
                               f"the order across ranks is not checked")
            r.out.ordered = False
        elif r.inflight:
            _access(r, func, args, kwargs)
        return out


def _access(r: Recorder, func, args, kwargs) -> None:
    schema = func._schema
    if any(ret.alias_info is not None and not ret.alias_info.is_write for ret in schema.returns):
        return  # a view: no data moves
    reads, writes = [], []
    values = list(args) + [kwargs.get(a.name) for a in schema.arguments[len(args):]]
    for a, v in zip(schema.arguments, values):
        bufs = _buffers(v)
        if not bufs:
            continue
        written = a.alias_info is not None and a.alias_info.is_write
        (writes if written else reads).extend(bufs)
        if written and func._opname not in ("copy_", "fill_", "zero_") and not a.kwarg_only:
            reads.extend(bufs)  # an in-place update reads what it writes
    if reads or writes:
        r.access(str(func.name()).replace("::", "."), tuple(reads), tuple(writes))


@contextlib.contextmanager
def recording(recorder: Recorder):
    """Record `recorder`'s rank's events while the block runs (on an initialised process group)."""
    saved = {}
    for name in list(_OPS) + ["batch_isend_irecv"]:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        wrapped = _wrap_batch(recorder, original) if name == "batch_isend_irecv" else _wrap(recorder, name, original)
        for module in (dist, c10d):
            saved[(module, name)] = getattr(module, name)
            setattr(module, name, wrapped)
    from .torch_pipelining import static_pipelining
    try:
        with _Accesses(recorder), static_pipelining(), (
                torch.autograd.graph.saved_tensors_hooks(recorder.pack, recorder.unpack) if recorder.track_saved
                else contextlib.nullcontext()):
            yield recorder
    finally:
        for (module, name), fn in saved.items():
            setattr(module, name, fn)


def record_events(fn: Callable[[], Any], rank: int, saved: bool = False) -> RankEvents:
    """Run ``fn()`` (the rank's program, on an initialised process group) and return its
    events; the tensors it returns are read after it returns (the caller uses them). With
    `saved` (a training step), the tensors autograd saves for backward are followed too."""
    recorder = Recorder(rank, saved)
    with recording(recorder):
        out = fn()
        returned = _buffers(list(_flat_outputs(out)))
        if returned:
            recorder.access("return", returned, (), line="(returned by the program)")
    recorder.keep.clear()
    return recorder.out


def _flat_outputs(out):
    if isinstance(out, dict):
        out = list(out.values())
    for v in out if isinstance(out, (list, tuple)) else [out]:
        local = getattr(v, "to_local", None)
        yield local() if callable(local) else v


def program_events(program: Any, data: dict, rank: int) -> RankEvents:
    """The events of one eager run of a captured rank's program, its state swapped in as
    copies (the module is left as it was); incomplete, with a note, where it cannot run."""
    from .torch_capture import _call, program_inputs
    try:
        inputs = program_inputs(program, data)
        run = _call(program, list(inputs), set(data))
        values = [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in inputs.values()]
        return record_events(lambda: run(*values), rank)
    except Exception as exc:  # noqa: BLE001  (a program that only traces: no temporal check)
        return _not_run(rank, exc)


def step_events(program: Any, data: dict, train, rank: int) -> RankEvents:
    """The events of one eager ``train_step`` of a captured rank's program, its parameters
    and buffers swapped for copies (the module is left as it was)."""
    from torch.nn.utils.stateless import _reparametrize_module
    from .torch_run import _step
    try:
        from .torch_capture import carrying, user_attributes
        attributes = user_attributes(program)
        copies = {n: carrying(t.detach().clone().requires_grad_(t.requires_grad), attributes.get(n))
                  for n, t in list(program.named_parameters()) + list(program.named_buffers())}
        with _reparametrize_module(program, copies):
            return record_events(lambda: _step(program, data, train, lambda m, *a: m.train_step(*a)), rank,
                                 saved=True)
    except Exception as exc:  # noqa: BLE001
        return _not_run(rank, exc)


def rank_events(graph, rank: int, eager: Callable[[], RankEvents] | None = None) -> RankEvents:
    """A captured rank's events: from an ``eager()`` run where given (it issued async ops:
    their waits and buffers matter), whose collectives must be the graph's, in its order
    (else -- a DTensor program's own collectives are not seen eagerly -- the order is not
    checked: ``ordered`` False, with a note); otherwise read off the graph and the events
    recorded while tracing it (graph_events)."""
    from_graph = graph_events(graph, rank)
    if eager is None:
        return from_graph
    events = eager()
    seen = [e.signature for e in events.events if e.kind == ISSUE and e.peer is None and e.op in _COLLECTIVE_OPS]
    if events.complete and seen != [e.signature for e in from_graph.events if e.kind == ISSUE and e.peer is None]:
        events.ordered = False
        events.notes.append("the eager run saw other collectives than the captured graph: their order across "
                            "ranks is not checked")
    _name_by_graph(events, from_graph)
    return events


def _name_by_graph(events: RankEvents, captured: RankEvents) -> None:
    """Give the eager run's issues the graph node, stage and microbatch of the captured
    issue at their place (the k-th P2P issue, the k-th collective), where both saw as many."""
    for p2p in (True, False):
        eager = [i for i, e in enumerate(events.events) if e.kind == ISSUE and (e.peer is not None) == p2p
                 and (p2p or e.op in _COLLECTIVE_OPS)]
        traced = [e for e in captured.events if e.kind == ISSUE and (e.peer is not None) == p2p]
        if len(eager) == len(traced):
            for i, t in zip(eager, traced):
                events.events[i] = dataclasses.replace(events.events[i], node=t.node, stage=t.stage,
                                                       microbatch=t.microbatch)


def graph_events(graph, rank: int) -> RankEvents:
    """A captured rank's program order: its graph's collectives (nodes in program order) as
    synchronous issues, among the point-to-point issues and the waits recorded while
    tracing it (``graph.events``, frontends/torch_p2p.py: a collective traced through the
    c10d API keeps its handle there). A graph names a group by its ranks only
    (``from_graph``: the check then matches collectives by their ranks)."""
    traced = graph.events.events if isinstance(graph.events, RankEvents) else []
    named = {e.node: i for i, e in enumerate(traced) if e.kind == ISSUE and e.node}
    merged, at = [], 0

    def flush(upto: int) -> None:  # the traced events before `upto` (waits, unnamed P2P issues)
        nonlocal at
        merged.extend(e for e in traced[at:upto] if e.kind != ISSUE or e.peer is not None)
        at = max(at, upto)
    for node in graph.nodes:
        if node.name in named:
            flush(named[node.name])
            at = max(at, named[node.name] + 1)
        if not node.op.startswith(COLLECTIVE_PREFIXES) or node.op.endswith("wait_tensor"):
            if node.name in named:
                merged.append(traced[named[node.name]])
            continue
        ranks = next((tuple(a) for a in reversed(node.args) if isinstance(a, (tuple, list))
                      and all(isinstance(x, int) for x in a)), ())
        first = next(iter(node.inputs), None)
        ty = first.type if first is not None and hasattr(first.type, "dtype") else None
        op = node.op.split(".")[-1]
        reduce = node.args[1] if len(node.args) > 1 and isinstance(node.args[1], str) else None
        e = traced[named[node.name]] if node.name in named else Event(line=node.source and str(node.source))
        merged.append(dataclasses.replace(e, kind=ISSUE, op=op, group=",".join(map(str, ranks)), ranks=ranks, peer=None,
                                          signature=signature(op, reduce, ty and ty.dtype, ty and ty.numel)))
    flush(len(traced))
    return RankEvents(rank, [dataclasses.replace(e, rank=rank, index=i) for i, e in enumerate(merged)],
                      from_graph=True)


def _not_run(rank: int, exc: Exception) -> RankEvents:
    return RankEvents(rank, notes=[f"the program could not run eagerly on the fake process group "
                                   f"({type(exc).__name__}: {str(exc)[:200]})"], complete=False)


def record_ranks(program: Callable[[int, int], Any], world_size: int) -> list[RankEvents]:
    """Each rank's events for ``program(rank, world_size)`` run on a fake process group."""
    from .torch_capture import fake_world
    out = []
    for rank in range(world_size):
        with fake_world(rank, world_size):
            out.append(record_events(lambda: program(rank, world_size), rank))  # noqa: B023
    return out
