"""Temporal checks over the program-order events of every rank (ir/events.py): a
happens-before model (program order on each rank; the k-th collective of a group matched
across its ranks; the k-th send r->p with a tag matched to the k-th receive on p from r
with that tag) and the hazards it exposes:

- ``use-before-wait``: an op reads a buffer an async collective/receive still writes;
- ``buffer-reused-before-completion``: an op writes a buffer an in-flight op reads or writes;
- ``concurrent-buffer-access``: an op is issued on a buffer another in-flight op writes
  (or writes one it reads);
- ``saved-buffer-overwritten``: a collective or receive writes a buffer autograd saved for
  backward before the backward used it (c10d does not bump the tensor's version, so
  autograd cannot see it: the backward silently uses the new values);
- ``collective-order-mismatch``: the ranks of a group issue different collectives at one
  position of the group's order (a silent mix-up), or block in collectives of different
  groups in a cycle (a deadlock);
- ``deadlock``: blocking semantics (a synchronous op and ``wait()`` block until every
  participant has issued its matching op; an async issue does not block) leave ranks
  waiting on each other in a cycle, or on an op a peer never issues.

Pure: events in, findings out.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.events import ACCESS, ISSUE, RECV_OPS, RELEASE, SAVE, SEND_OPS, WAIT, Event, RankEvents
from .result import Finding

HINTS = {
    "use-before-wait": "call wait() on the work handle (or the collective's result) before reading the buffer; "
                       "overlap only work that does not touch it",
    "buffer-reused-before-completion": "wait() on the in-flight op before writing its buffer, or write into a "
                                       "fresh buffer (double-buffering) while it is in flight",
    "concurrent-buffer-access": "give each in-flight op its own buffer, or wait() on the first before issuing "
                                "the second",
    "saved-buffer-overwritten": "receive each microbatch into a fresh buffer (or clone the received tensor before "
                                "the forward uses it) while an earlier microbatch's backward is still to run",
    "collective-order-mismatch": "issue the collectives of each group in the same order on every rank (iterate "
                                 "in a deterministic order, not over a set or a rank-dependent branch)",
    "deadlock": "order blocking sends and receives so that one side of every pair sends first (even stages "
                "send, odd stages receive), or issue them together with batch_isend_irecv / isend+irecv and "
                "wait on both",
}
MAX_FINDINGS = 20


@dataclass
class TemporalResult:
    findings: list[Finding] = field(default_factory=list)
    events: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"events": self.events, "findings": len(self.findings), "notes": list(self.notes)}


def _finding(kind: str, ranks, e: Event, message: str, node: str | None = None) -> Finding:
    return Finding(kind=kind, rank=sorted(set(ranks)), node=node or e.node or f"event {e.index} on rank {e.rank}",
                   op=e.op if "." in e.op else f"c10d.{e.op}", source=e.line, expected="happens-before",
                   actual="none", message=message, hint=HINTS[kind], stage=e.stage, microbatch=e.microbatch)


# ---------------------------------------------------------------- one rank: buffers in flight

def buffer_hazards(rank: RankEvents) -> list[Finding]:
    """Accesses and issues that touch the buffers of an async op between its issue and its
    wait() on this rank."""
    inflight: dict[int, Event] = {}
    saved: dict[int, Event] = {}  # tensors autograd saved for a backward still to run
    out: list[Finding] = []
    seen = set()

    def report(kind, e: Event, o: Event, what: str):
        key = (kind, e.op, e.line)
        if key not in seen:
            seen.add(key)
            out.append(_finding(kind, [rank.rank], e, f"rank {rank.rank}: {what} {o.describe()}, which is still in "
                                                       f"flight (issued, not yet waited on)"))
    for e in rank.events:
        if e.kind == SAVE:
            saved[e.handle] = e
        elif e.kind == RELEASE:
            saved.pop(e.handle, None)
        elif e.kind == WAIT:
            inflight.pop(e.handle, None)
        elif e.kind == ACCESS:
            for o in inflight.values():
                if _touch(e.reads, o.writes):
                    report("use-before-wait", e, o, f"{e.op} reads a buffer written by")
                elif _touch(e.writes, o.reads + o.writes):
                    report("buffer-reused-before-completion", e, o,
                           f"{e.op} writes a buffer {'written' if _touch(e.writes, o.writes) else 'read'} by")
        elif e.kind == ISSUE:
            for o in inflight.values():
                if _touch(e.writes, o.reads + o.writes) or _touch(e.reads, o.writes):
                    report("concurrent-buffer-access", e, o, f"{e.describe()} uses a buffer of")
            for o in saved.values():
                if _touch(e.writes, o.reads) and ("saved-buffer-overwritten", e.op, e.line) not in seen:
                    seen.add(("saved-buffer-overwritten", e.op, e.line))
                    out.append(_finding("saved-buffer-overwritten", [rank.rank], e, (
                        f"rank {rank.rank}: {e.describe()} writes a buffer autograd saved for backward at {o.line} "
                        f"(buffer reused while saved for backward; its backward has not run yet): c10d does not bump "
                        f"the tensor's version, so autograd cannot see it and the backward silently uses the new "
                        f"values")))
            if e.async_op and e.handle is not None:
                inflight[e.handle] = e
    return out


def _touch(a: tuple, b: tuple) -> bool:
    return any(x.overlaps(y) for x in a for y in b)


# ---------------------------------------------------------------- across ranks: matching

def match(ranks: list[RankEvents]) -> tuple[dict, list[Finding]]:
    """(issue (rank, index) -> its matched issues on the other ranks, mismatch findings)."""
    by_group: dict[tuple, dict[int, list[Event]]] = {}
    sends: dict[tuple, list[Event]] = {}
    recvs: dict[tuple, list[Event]] = {}
    by_ranks = any(r.from_graph for r in ranks)  # a graph knows a group by its ranks only
    for r in ranks:
        for e in r.events:
            if e.kind != ISSUE:
                continue
            if e.op in SEND_OPS and e.peer is not None:
                sends.setdefault((e.rank, e.peer, e.tag), []).append(e)
            elif e.op in RECV_OPS and e.peer is not None:
                recvs.setdefault((e.peer, e.rank, e.tag), []).append(e)
            elif e.op not in SEND_OPS | RECV_OPS:
                by_group.setdefault((None if by_ranks else e.group, e.ranks), {}).setdefault(e.rank, []).append(e)
    partners: dict[tuple, list] = {}
    findings: list[Finding] = []
    present = {r.rank for r in ranks}
    for (_, members), per_rank in by_group.items():
        members = [m for m in members if m in present]
        for k in range(max(len(v) for v in per_rank.values())):
            ops = {m: per_rank[m][k] if k < len(per_rank.get(m, [])) else None for m in members}
            for m, e in ops.items():
                if e is not None:
                    partners[(m, e.index)] = [ops[o] for o in members if o != m]
            issued = [e for e in ops.values() if e is not None]
            if len({e.signature for e in issued}) > 1:
                findings.append(_mismatch(issued[0].group, k, issued))
    for key, ss in sends.items():
        rs = recvs.get(key, [])
        for i, s in enumerate(ss):
            partners[(s.rank, s.index)] = [rs[i] if i < len(rs) else None]
        for i, r in enumerate(rs):
            partners[(r.rank, r.index)] = [ss[i] if i < len(ss) else None]
    for key, rs in recvs.items():
        if key not in sends:
            for r in rs:
                partners[(r.rank, r.index)] = [None]
    return partners, findings


def _mismatch(group: str, k: int, issued: list[Event]) -> Finding:
    ops = "; ".join(f"rank {e.rank}: {e.describe()}" for e in issued)
    sigs = [e.signature for e in issued]
    usual = max(sigs, key=sigs.count)  # ties: the lowest rank's
    odd = next(e for e in issued if e.signature != usual)  # located where a rank departs from the others
    return _finding("collective-order-mismatch", [e.rank for e in issued], odd,
                    f"collective #{k + 1} of group {group} differs across its ranks ({ops}): each rank's op is "
                    f"combined with a different op of its peers (a silent mix-up or a hang)")


# ---------------------------------------------------------------- across ranks: blocking

def deadlocks(ranks: list[RankEvents], partners: dict) -> list[Finding]:
    """Run every rank's events under blocking semantics; a state where no rank moves and
    some have not finished is a deadlock: report the cycle of waits (or the op a peer never
    issues)."""
    pc = {r.rank: 0 for r in ranks}
    events = {r.rank: r.events for r in ranks}
    issued: set = set()
    handle_of: dict[tuple, Event] = {}

    def blocked_on(rank: int):
        """The issue event rank `rank` is blocked on now, or None if it can move."""
        e = events[rank][pc[rank]]
        if e.kind == WAIT:
            target = handle_of.get((rank, e.handle))
        elif e.kind == ISSUE and not e.async_op:
            target = e
        else:
            return None
        if target is None or all(p is not None and (p.rank, p.index) in issued
                                 for p in partners.get((rank, target.index), [])):
            return None
        return target
    moved = True
    while moved:
        moved = False
        for r in pc:
            while pc[r] < len(events[r]):
                e = events[r][pc[r]]
                if e.kind == ISSUE and (r, e.index) not in issued:
                    issued.add((r, e.index))
                    if e.handle is not None:
                        handle_of[(r, e.handle)] = e
                    moved = True
                if blocked_on(r) is not None:
                    break
                pc[r] += 1
                moved = True
    stuck = {r: blocked_on(r) for r in pc if pc[r] < len(events[r])}
    return _deadlock_findings(stuck, partners, issued) if stuck else []


def _deadlock_findings(stuck: dict, partners: dict, issued: set) -> list[Finding]:
    waits = {r: sorted({p.rank for p in partners.get((r, e.index), []) if p is not None and (p.rank, p.index)
                        not in issued} | _missing(r, e, partners)) for r, e in stuck.items()}
    cycle = _cycle(waits)
    if cycle:
        ops = [stuck[r] for r in cycle]
        kind = "collective-order-mismatch" if all(e.peer is None for e in ops) else "deadlock"
        chain = "; ".join(f"rank {r} blocks in {stuck[r].describe()} waiting for rank "
                          f"{next(p for p in waits[r] if p in cycle)}" for r in cycle)
        why = ("the ranks issue collectives of these groups in different orders" if kind != "deadlock"
               else "every rank of the cycle blocks before issuing what its peer waits for")
        return [_finding(kind, cycle, ops[0], f"deadlock: {chain} ({why})")]
    r, e = next(iter(stuck.items()))
    peers = ", ".join(str(p) for p in waits[r]) or "no rank"
    return [_finding("deadlock", [r], e, f"hang: rank {r} blocks in {e.describe()}, whose matching op rank(s) "
                                         f"{peers} never issue (the ranks issue different numbers of these ops)")]


def _missing(rank: int, e: Event, partners: dict) -> set:
    if e.peer is not None:
        return {e.peer} if None in partners.get((rank, e.index), [None]) else set()
    have = {p.rank for p in partners.get((rank, e.index), []) if p is not None}
    return {m for m in e.ranks if m != rank and m not in have}


def _cycle(waits: dict) -> list[int]:
    """A cycle in the waits-for graph among blocked ranks (smallest rank first), or []."""
    for start in sorted(waits):
        path, r = [], start
        while r in waits and r not in path:
            path.append(r)
            r = next((p for p in waits[r] if p in waits), None)
            if r is None:
                break
        if r is not None and r in path:
            loop = path[path.index(r):]
            i = loop.index(min(loop))
            return loop[i:] + loop[:i]
    return []


# ---------------------------------------------------------------- all of it

def check(ranks: list[RankEvents]) -> TemporalResult:
    """Every hazard of the module doc, in a stable order: per-rank buffer hazards (by rank),
    then mismatched collectives, then deadlocks."""
    result = TemporalResult(events=sum(len(r.events) for r in ranks),
                            notes=[f"rank {r.rank}: {n}" for r in ranks for n in r.notes])
    for r in ranks:
        result.findings.extend(buffer_hazards(r))
    if all(r.ordered for r in ranks):
        partners, mismatched = match(ranks)
        result.findings.extend(mismatched)
        if not mismatched:
            result.findings.extend(deadlocks(ranks, partners))
    del result.findings[MAX_FINDINGS:]
    return result


def apply_to_report(report, ranks: list) -> None:
    """Check `ranks` (each rank's RankEvents, None where not recorded) and add the result to
    `report`: its ``temporal`` section, and the hazards as findings after the relational
    ones (a hazard makes a verified or unknown report a violation)."""
    import time
    if not ranks or any(r is None for r in ranks):
        return
    if not all(r.complete for r in ranks):
        report.temporal = {"checked": False, "events": 0, "findings": 0, "seconds": 0.0,
                           "notes": [f"rank {r.rank}: {n}" for r in ranks for n in r.notes]}
        return
    t0 = time.perf_counter()
    result = check(ranks)
    report.temporal = {"checked": True, **result.to_json(), "seconds": round(time.perf_counter() - t0, 4)}
    if not result.findings:
        return
    if report.status != "violation":
        report.status, report.reason = "violation", ""
        report.findings = []
    # a saved buffer overwritten changes the values the backward computes: the relational
    # findings downstream are its effect, so it comes first
    causes = [f for f in result.findings if f.kind == "saved-buffer-overwritten"]
    report.findings[:0] = causes
    report.findings.extend(f for f in result.findings if f not in causes)
