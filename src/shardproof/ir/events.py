"""Program-order events beside the graph: what each rank issued, in the order it issued it.

A functional capture makes every communication synchronous, so the graph alone cannot say
*when* things happen. Frontends that capture point-to-point or async communication also
record, per rank, an ordered list of `Event`s: the issue of a communication op (with its
handle id when it is async, the buffer it reads or writes, its peer or group) and each
``wait(handle)``. Temporal checks (happens-before, races, deadlocks) read only this list and
the graph; the graph's nodes are referred to by name (``node``), never by object.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .graph import Source

ISSUE = "issue"   # a communication op was issued (sync or async)
WAIT = "wait"     # wait(handle): the op with that handle has completed
COMPUTE = "compute"  # optional: a graph node read/wrote a buffer (for buffer-use checks)


@dataclass(frozen=True)
class Event:
    """One step of a rank's program order.

    kind: ISSUE, WAIT or COMPUTE.
    op: the op issued (``send``, ``recv``, ``isend``, ``irecv``, ``all_reduce``...), or "" for WAIT.
    handle: id of the async work this event issues or waits on (None for a blocking op;
        a blocking op is an issue immediately followed by its completion).
    buffer: identity of the tensor storage read (send) or written (recv), stable within a
        rank (e.g. ``"buf3"``); None where no buffer is involved.
    peer: the other rank (global rank) of a point-to-point op; None for collectives.
    group: the ranks of the process group of a collective (or of the P2P op's group).
    tag: the P2P tag.
    node: name of the graph node holding this op's value (a recv's received tensor, a
        send's sent tensor), if any.
    reads / writes: buffers a COMPUTE event reads / writes.
    stage / microbatch: the pipeline stage and microbatch this event belongs to, if known.
    source: the user's line that issued it.
    """

    kind: str
    op: str = ""
    handle: int | None = None
    buffer: str | None = None
    peer: int | None = None
    group: tuple[int, ...] | None = None
    tag: int = 0
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    node: str | None = None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    stage: int | None = None
    microbatch: int | None = None
    source: Source | None = None

    @property
    def is_async(self) -> bool:
        return self.kind == ISSUE and self.handle is not None


@dataclass
class EventLog:
    """Per rank, the ordered events it issued: ``ranks[r]`` is rank r's program order."""

    ranks: list[list[Event]] = field(default_factory=list)

    def of(self, rank: int) -> list[Event]:
        return self.ranks[rank]

    def issues(self, rank: int, op_prefix: str = "") -> list[Event]:
        return [e for e in self.ranks[rank] if e.kind == ISSUE and e.op.startswith(op_prefix)]

    def p2p(self, rank: int) -> list[Event]:
        """Rank `rank`'s point-to-point issues (those with a peer), in order."""
        return [e for e in self.ranks[rank] if e.kind == ISSUE and e.peer is not None]
