"""``torch.distributed``'s point-to-point ops routed to dataflow ops while tracing, and the
rank's program order recorded beside the graph.

``send``/``isend`` become ``shardproof_p2p.send(x, peer, tag)`` (its value: the tensor sent),
``recv``/``irecv`` become ``shardproof_p2p.recv(buf, peer, tag)`` (its value: what arrives,
copied into the buffer); ``batch_isend_irecv`` is its ops in list order. Peers are global
ranks. Under the fake process group nothing arrives: the engine pairs each recv with the
send on the peer of the same (source, destination, tag) channel, in order
(:mod:`shardproof.engine.lockstep`), as c10d does. Async ops return a handle whose
``wait()`` is recorded: every issue and wait is an :class:`~shardproof.ir.events.Event` of the
rank's program order (``Graph.events``), with the handle, the buffer, the peer and the line.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch import Tensor

from ..ir.events import ISSUE, RECV_OPS, SEND_OPS, WAIT, Buffer, Event, RankEvents
from ..ir.graph import Graph, Source
from .torch_collectives import ASYNC_ISSUED

P2P_PREFIX = "shardproof_p2p."
PIPELINE_META = "shardproof_pipeline"  # key in an fx node's meta["custom"]: (stage, microbatch)


@torch.library.custom_op("shardproof_p2p::send", mutates_args=())
def _send_op(x: Tensor, peer: int, tag: int) -> Tensor:
    """Send `x` to global rank `peer`; its value is the tensor sent."""
    return x.clone()


@_send_op.register_fake
def _(x, peer, tag):
    return torch.empty_like(x)


@torch.library.custom_op("shardproof_p2p::recv", mutates_args=())
def _recv_op(buf: Tensor, peer: int, tag: int) -> Tensor:
    """What global rank `peer` sends on `tag` (shaped as `buf`)."""
    return buf.clone()


@_recv_op.register_fake
def _(buf, peer, tag):
    return torch.empty_like(buf)


# ---------------------------------------------------------------- program order

class _Recorder:
    def __init__(self):
        self.events: list[Event] = []
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.handles = itertools.count(1)
        self.tensors: dict[int, Tensor] = {}  # id(tensor) -> the tensor, kept alive (its id names its buffer)
        self.where: tuple = (None, None)  # (stage, microbatch) being run, as the schedule says

    def buffer(self, t: Tensor) -> Buffer:
        """A traced tensor has no data: its buffer is the tensor object itself."""
        self.tensors.setdefault(id(t), t)
        return Buffer(id(t), 0, t.numel() * t.element_size(), t.element_size())


_recorder: _Recorder | None = None


@contextlib.contextmanager
def recording():
    """Record the P2P events issued inside; yields their list (filled as they are issued)."""
    global _recorder
    saved, _recorder = _recorder, _Recorder()
    try:
        yield _recorder.events
    finally:
        _recorder = saved


@contextlib.contextmanager
def pipeline_position(stage: int | None, microbatch: int | None):
    """Mark what runs inside as (stage, microbatch): the events, and every traced node
    (its finding then names them)."""
    from torch.fx import traceback as fx_traceback
    rec = _recorder
    saved = rec.where if rec else None
    if rec:
        rec.where = (stage, microbatch)
    try:
        with fx_traceback.preserve_node_meta(), fx_traceback.annotate({PIPELINE_META: (stage, microbatch)}):
            yield
    finally:
        if rec:
            rec.where = saved


def _line() -> str | None:
    from .torch_capture import innermost_user_frame
    frame = innermost_user_frame()
    return None if frame is None else str(Source(frame.filename, frame.lineno, frame.name))


def _record(kind: str, op: str = "", t=None, peer=None, tag=0, handle=None, group=None) -> None:
    rec = _recorder
    if rec is None:
        return
    stage, mb = rec.where
    bufs = () if t is None else (rec.buffer(t),)
    g = group or dist.group.WORLD
    reads_it = kind == ISSUE and op not in RECV_OPS
    writes_it = kind == ISSUE and op not in SEND_OPS
    rec.events.append(Event(rank=rec.rank, index=len(rec.events), kind=kind, op=op or kind,
                            group=g.group_name if kind == ISSUE else None,
                            ranks=tuple(dist.get_process_group_ranks(g)) if kind == ISSUE else (),
                            peer=peer, tag=tag, handle=handle, async_op=kind == ISSUE and handle is not None,
                            reads=bufs if reads_it else (), writes=bufs if writes_it else (),
                            line=_line(), stage=stage, microbatch=mb))


class P2PWork:
    """The handle of an async P2P op or collective: ``wait()`` is recorded (the value is already in place)."""

    def __init__(self, handle: int):
        self.handle = handle

    def wait(self, *args, **kwargs):
        _record(WAIT, handle=self.handle)
        return True

    def is_completed(self):
        return True


def record_collective(op: str, tensor, group, async_op: bool):
    """Record a collective's issue on the rank's program order (its group as global ranks);
    returns its work handle when async (None otherwise)."""
    handle = next(_recorder.handles) if (async_op and _recorder) else None
    _record(ISSUE, op, tensor if isinstance(tensor, Tensor) else None, handle=handle, group=group)
    return P2PWork(handle) if async_op else None


def _peer(group, peer, group_peer) -> int:
    return c10d._canonicalize_group_rank(c10d._group_or_default_group(group), peer, group_peer, return_global=True)


def _issue(op: str, tensor: Tensor, peer: int, tag: int, async_op: bool, group=None):
    handle = next(_recorder.handles) if (async_op and _recorder) else None
    # its buffers' uses matter (a recv's: autograd may have saved it): the temporal checks run the rank eagerly
    ASYNC_ISSUED[0] += async_op or op == "recv"
    _record(ISSUE, op, tensor, peer, tag, handle, group)
    # on the wire a tensor is its elements in order (c10d checks count and dtype, not shape):
    # a recv into a buffer of another shape with as many elements reads them in that shape
    if op.endswith("send"):
        torch.ops.shardproof_p2p.send(tensor.reshape(-1), peer, tag)
    else:
        # c10d writes the buffer outside autograd, without bumping its version: autograd does not see the write
        with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(tensor):
            tensor.copy_(torch.ops.shardproof_p2p.recv(tensor.reshape(-1), peer, tag).view(tensor.shape))
    return P2PWork(handle) if async_op else None


def _send(tensor, dst=None, group=None, tag=0, group_dst=None):
    _issue("send", tensor, _peer(group, dst, group_dst), tag, False, group)


def _recv(tensor, src=None, group=None, tag=0, group_src=None):
    peer = _peer(group, src, group_src)
    _issue("recv", tensor, peer, tag, False, group)
    return peer


def _isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    return _issue("isend", tensor, _peer(group, dst, group_dst), tag, True, group)


def _irecv(tensor, src=None, group=None, tag=0, group_src=None):
    return _issue("irecv", tensor, _peer(group, src, group_src), tag, True, group)


def _batch_isend_irecv(p2p_op_list):
    """Each op in list order, one handle each (c10d coalesces them; the order of issue
    within a batch does not matter to the pairing, which is per channel)."""
    return [_issue("isend" if op.op in (_isend, _ORIGINAL.get("isend")) else "irecv", op.tensor, op.peer, op.tag, True,
                   op.group)
            for op in p2p_op_list]


_P2P = {"send": _send, "recv": _recv, "isend": _isend, "irecv": _irecv, "batch_isend_irecv": _batch_isend_irecv}
_ORIGINAL = {name: getattr(c10d, name) for name in _P2P}


@contextlib.contextmanager
def functional_p2p():
    """Route the P2P ops (``torch.distributed`` and its c10d module, which ``P2POp`` checks
    its op against) to dataflow ops while tracing; ``torch.distributed.pipelining``'s
    schedules with their warm-up vote decided locally (:mod:`.torch_pipelining`)."""
    from .torch_pipelining import static_pipelining
    saved = [(m, name, getattr(m, name)) for m in (dist, c10d) for name in _P2P if hasattr(m, name)]
    try:
        for m, name, _ in saved:
            setattr(m, name, _P2P[name])
        with static_pipelining():
            yield
    finally:
        for m, name, fn in saved:
            setattr(m, name, fn)


def attach_events(graph: Graph, events: list[Event], fx_graph=None) -> Graph:
    """Name each issue event's graph node (the k-th P2P node is the k-th issue: both are
    in program order) and keep the events on the graph (``graph.events``, the rank's
    :class:`RankEvents`); with the fx graph, the (stage, microbatch) of every node the
    schedule marked."""
    from ..ops.registry import lookup
    p2p_nodes = iter([n for n in graph.nodes if n.op.startswith(P2P_PREFIX)])
    collective_nodes = [n for n in graph.nodes if getattr(lookup(n.op), "collective", False)]
    collective_events = [e for e in events if e.kind == ISSUE and e.peer is None]
    # collectives made without a c10d call (DTensor's) have no event: then name none of them
    collective_nodes = iter(collective_nodes if len(collective_nodes) == len(collective_events) else [])
    named = []
    for e in events:
        if e.kind == ISSUE:
            node = next(p2p_nodes if e.peer is not None else collective_nodes, None)
            e = dataclasses.replace(e, node=node.name if node is not None else None)
        named.append(e)
    rank = events[0].rank if events else (dist.get_rank() if dist.is_initialized() else 0)
    graph.events = RankEvents(rank, named)
    if fx_graph is not None:
        graph.positions = {n.name: n.meta["custom"][PIPELINE_META] for n in fx_graph.nodes
                           if PIPELINE_META in n.meta.get("custom", {})}
    return graph
