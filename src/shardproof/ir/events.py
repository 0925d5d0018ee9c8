"""Program-order events beside the graph: what each rank issued to ``torch.distributed``,
in the order it issued it, and which storage its ordinary ops read and wrote meanwhile.

A functional capture makes every communication synchronous, so the graph alone cannot say
*when* things happen. Each rank's events (:class:`RankEvents`, ``Graph.events``) are its
collectives' and point-to-point ops' issues (with the handle when async, the buffers read
and written, the peer or group, the graph node holding the op's value, the pipeline stage
and microbatch), each ``wait(handle)``, and -- from an eager run -- the accesses of ordinary
ops to buffers an async op has in flight. Temporal checks (engine/temporal.py:
happens-before, races, deadlocks) read only these; graph nodes are referred to by name.

Producers: frontends/torch_p2p.py (while tracing: issues and waits, graph nodes, stage and
microbatch), frontends/torch_events.py (an eager run: storage byte ranges and accesses; a
captured graph's collectives).
"""
from __future__ import annotations

from dataclasses import dataclass, field

ISSUE = "issue"    # a collective or P2P op was issued; a synchronous one completes before the next event
WAIT = "wait"      # Work.wait() on `handle`: the op with that handle has completed
ACCESS = "access"  # an ordinary op read/wrote buffers of an op in flight
SAVE = "save"      # autograd saved a buffer for backward (`handle`: the saved tensor's number; `reads`: its bytes)
RELEASE = "release"  # the backward used the saved tensor `handle` (unpacked it): its bytes may change now
SEND_OPS = frozenset({"send", "isend"})
RECV_OPS = frozenset({"recv", "irecv"})


@dataclass(frozen=True)
class Buffer:
    """Bytes of one storage an op touches: [start, stop) in bytes, and where the tensor is
    not contiguous the exact byte offsets of its elements' first bytes (``elements``).
    ``storage`` identifies the storage within a rank (its data pointer in an eager run; the
    tensor's identity while tracing, where tensors have no data)."""
    storage: int
    start: int
    stop: int
    itemsize: int = 1
    elements: frozenset | None = None

    def overlaps(self, other: "Buffer") -> bool:
        if self.storage != other.storage or self.stop <= other.start or other.stop <= self.start:
            return False
        if self.elements is None and other.elements is None:
            return True
        mine = self._bytes(other)
        theirs = other._bytes(self)
        return bool(mine & theirs)

    def _bytes(self, window: "Buffer") -> set:
        """The bytes of this buffer inside `window`'s byte range."""
        lo, hi = max(self.start, window.start), min(self.stop, window.stop)
        if self.elements is None:
            return set(range(lo, hi))
        return {e + i for e in self.elements for i in range(self.itemsize) if lo <= e + i < hi}


@dataclass(frozen=True)
class Event:
    """One step of a rank's program order.

    rank / index: the rank and the event's position in its order.
    kind: ISSUE, WAIT, ACCESS, SAVE or RELEASE.
    op: the c10d op issued (``all_reduce``, ``send``, ``irecv``...), ``wait``, or the aten op of an access.
    group / ranks: the process group's name and its global ranks (a P2P op's too).
    peer / tag: a P2P op's other side (global rank) and tag; peer None for collectives.
    handle: the Work an async issue returned, or the one a WAIT waits on (None: blocking);
        for SAVE / RELEASE the number of the tensor autograd saved.
    reads / writes: the Buffers the op reads / writes.
    signature: what must agree across the ranks of one collective (op, reduce op, dtype, size).
    line: the innermost user source line, "file:line in function".
    node: the graph node holding the op's value (a recv's received tensor, a send's sent one).
    stage / microbatch: the pipeline stage and microbatch it ran in, if a schedule said so.
    """

    rank: int = 0
    index: int = 0
    kind: str = ISSUE
    op: str = ""
    group: str | None = None
    ranks: tuple = ()
    peer: int | None = None
    tag: int = 0
    handle: int | None = None
    async_op: bool = False
    reads: tuple = ()
    writes: tuple = ()
    signature: tuple = ()
    line: str | None = None
    node: str | None = None
    stage: int | None = None
    microbatch: int | None = None

    @property
    def buffers(self) -> tuple:
        """Every Buffer the event touches (reads, then writes)."""
        return self.reads + self.writes

    def describe(self) -> str:
        where = f" at {self.line}" if self.line else ""
        peer = f" peer {self.peer}" if self.peer is not None else ""
        group = f" on group {self.group}" if self.group and self.peer is None else ""
        mode = " (async)" if self.async_op else ""
        return f"{self.op}{mode}{peer}{group}{where}"


@dataclass
class RankEvents:
    """One rank's events in program order; `notes` say what the capture could not see."""
    rank: int
    events: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    complete: bool = True  # False: the program could not be run to record them (see notes)
    ordered: bool = True  # False: the collectives' order is not known completely (see notes)
    from_graph: bool = False  # read off a captured graph, which names groups by their ranks only

    def p2p(self) -> list[Event]:
        """The point-to-point issues (those with a peer), in order."""
        return [e for e in self.events if e.kind == ISSUE and e.peer is not None]


_SAME_OP = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor",
            "all_to_all": "all_to_all_single", "all_gather_single": "all_gather_into_tensor",
            "reduce_scatter_single": "reduce_scatter_tensor"}
_SIZED = {"all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "reduce_scatter_tensor"}


def signature(op: str, reduce: str | None, dtype: str | None, numel: int | None) -> tuple:
    """What must agree across the ranks at one position of a group's collective order:
    the same for the c10d API, the functional collectives and a captured graph's nodes."""
    op = _SAME_OP.get(op, op)
    return (op, reduce, dtype, numel if op in _SIZED else None)
