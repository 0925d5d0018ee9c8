"""Per-rank program-order events: what each rank issues to ``torch.distributed`` and which
storage its ordinary ops read and write (the temporal checks' input, engine/temporal.py).

Minimal shape shared with the point-to-point/pipeline capture:
``Event(rank, index, kind, op, group, peer, tag, buffers, handle, line)``, plus the fields
the temporal checks need (``reads``/``writes`` split the buffers by access, ``async_op``,
``ranks`` of the group, ``signature`` compared across the ranks of a collective).
Kinds: ``issue`` (a collective or P2P op; synchronous ones complete before the next
event), ``wait`` (``Work.wait()`` of `handle`), ``access`` (an ordinary op's reads/writes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

ISSUE, WAIT, ACCESS = "issue", "wait", "access"
SEND_OPS = frozenset({"send", "isend"})
RECV_OPS = frozenset({"recv", "irecv"})


@dataclass(frozen=True)
class Buffer:
    """Bytes of one storage an op touches: [start, stop) in bytes, and where the tensor is
    not contiguous the exact byte offsets of its elements' first bytes (``elements``)."""
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


@dataclass
class Event:
    rank: int
    index: int
    kind: str  # issue | wait | access
    op: str = ""  # c10d op (all_reduce, isend, ...) or aten op
    group: str | None = None  # the process group's name
    peer: int | None = None  # P2P: the other side's global rank
    tag: int = 0
    buffers: tuple = ()  # every Buffer touched (reads + writes)
    handle: int | None = None  # issue: the Work handle it returned (async); wait: the handle waited on
    line: str | None = None  # the innermost user source line, "file:line in function"
    reads: tuple = ()
    writes: tuple = ()
    async_op: bool = False
    ranks: tuple = ()  # the group's global ranks
    signature: tuple = ()  # what must agree across the ranks of one collective (reduce op, dtype, size)

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
