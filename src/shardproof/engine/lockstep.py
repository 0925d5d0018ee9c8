"""Run every rank's graph in lockstep: collectives are matched in program order per
group, as a real process group would match them. Used for both the symbolic
interpretation and the numeric evaluation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..ir.events import ISSUE, RECV_OPS
from ..ir.graph import Graph, Node
from ..ops.registry import ArgsMismatch, lookup


@dataclass
class CollectiveMismatch:
    """Ranks that blocked on collectives that do not pair up (a hang or a silent mix-up)."""

    ranks: list[int]
    nodes: list[Node]
    message: str
    kind: str = "collective-mismatch"
    hint: str = "make every rank of the group issue the same collectives in the same order"


@dataclass
class LockstepResult:
    envs: list[dict]
    mismatch: CollectiveMismatch | None = None
    order: list[tuple[int, Node]] = field(default_factory=list)


def resolve(value, env: dict):
    if isinstance(value, Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return type(value)(resolve(v, env) for v in value)
    return value


def is_collective(node: Node) -> bool:
    opdef = lookup(node.op)
    return bool(opdef and opdef.collective)


def _is_p2p(node: Node) -> bool:
    from ..ops.p2p import is_p2p
    return is_p2p(node.op)


def _where(node: Node) -> str:
    if _is_p2p(node):
        return f"{node.op.split('.')[-1]} with rank {node.args[1]} (tag {node.args[2]})"
    return f"group {list(node.args[-1])}"


def _reach(starts, step) -> set:
    seen, stack = set(), list(starts)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(step(n))
    return seen


def program_order(graph: Graph) -> list[Node]:
    """The graph's nodes in the order its rank runs them here: as captured, except that an
    async receive (``irecv``, as the rank's events say: ir/events.py) and the local ops on
    its value wait until a communication op needs them (after the earlier receives of its
    channel), so that the ops issued after it go first. A blocking receive stays where it
    is: whether the program blocks is the temporal checks' question."""
    events = getattr(getattr(graph, "events", None), "events", ())
    deferred = {e.node for e in events if e.kind == ISSUE and e.async_op and e.op in RECV_OPS and e.node}
    if not deferred:
        return list(graph.nodes)
    order: list[Node] = []
    held: list[Node] = []
    holding: set = set()

    def emit(needed: set) -> None:
        """Run the held nodes `needed` reads, their held inputs, and the receives before them on their channels."""
        closure = _reach(needed, lambda x: [i for i in x.inputs if i in holding] + (
            [h for h in held[:held.index(x)] if _is_p2p(h) and h.args[1:3] == x.args[1:3]] if _is_p2p(x) else []))
        order.extend(h for h in held if h in closure)
        held[:] = [h for h in held if h not in closure]
        holding.difference_update(closure)
    for node in graph.nodes:
        needs = {i for i in node.inputs if i in holding}
        communicates = is_collective(node) or _is_p2p(node)
        if (node.name in deferred and _is_p2p(node)) or (needs and not communicates):
            held.append(node)
            holding.add(node)
            continue
        if needs:
            emit(needs)
        order.append(node)
    return order + held


def _p2p_step(r: int, node: Node, args: tuple, channels: dict):
    """A send posts its value on channel (r, peer, tag) and goes on; a recv takes the first
    value posted on (peer, r, tag), or blocks (None). A value whose shape or dtype is not the
    receive buffer's: a mismatch naming both ends."""
    peer, tag = int(node.args[1]), int(node.args[2])
    if node.op.endswith("send"):
        channels.setdefault((r, peer, tag), []).append((node, args[0]))
        return args[0]
    posted = channels.get((peer, r, tag))
    if not posted:
        return None
    send, value = posted.pop(0)
    if (send.type.shape, send.type.dtype) != (node.type.shape, node.type.dtype):
        return CollectiveMismatch([peer, r], [send, node], f"rank {peer} sends {send.type.numel} {send.type.dtype} "
                                  f"elements ({send.name}) to rank {r}, which receives {node.type.numel} "
                                  f"{node.type.dtype} elements ({node.name}) on tag {tag}",
                                  "p2p-mismatch", "make the receive buffer as large as the tensor sent, and of its dtype")
    return value


def _unreceived(channels: dict) -> CollectiveMismatch | None:
    for (src, dst, tag), posted in sorted(channels.items()):
        if posted:
            send = posted[0][0]
            return CollectiveMismatch([src], [send], f"rank {src} sends {send.name} to rank {dst} on tag {tag}, "
                                      f"which never receives it", "p2p-mismatch",
                                      "pair every send with a recv on the peer (same peer, tag and order)")
    return None


def _match(group: tuple, nodes: list[Node], args: list[tuple]) -> tuple | str:
    """The arguments after the first that the collective's rule receives, or why the
    members' calls do not pair up (different collectives, or arguments that must agree)."""
    opdef = lookup(nodes[0].op)
    different = "ranks " + ", ".join(f"{g}: {m.op.split('.')[-1]}{list(a[1:-1])}" for g, m, a in zip(group, nodes, args)) \
        + " meet at the same point with different collectives"
    if len({n.op for n in nodes}) > 1:
        return different
    if opdef.match is not None:
        try:
            return tuple(opdef.match([a for a in args]))
        except ArgsMismatch as exc:
            return f"{nodes[0].op.split('.')[-1]}: {exc}"
    if len({repr(list(a[1:-1])) for a in args}) > 1:
        return different
    return tuple(args[0][1:])


def run_lockstep(graphs: list[Graph], eval_node: Callable[[int, Node, dict], Any],
                 eval_collective: Callable[[list[Node], list[tuple]], list]) -> LockstepResult:
    """`eval_node(rank, node, env)` computes a local op; `eval_collective(nodes, args)`
    computes one matched collective from each member's resolved arguments."""
    envs: list[dict] = [dict() for _ in graphs]
    order: list[tuple[int, Node]] = []

    def rank_program(r: int):
        env = envs[r]
        for node in program_order(graphs[r]):
            if is_collective(node) or _is_p2p(node):
                env[node] = yield node, resolve(node.args, env)
            else:
                env[node] = eval_node(r, node, env)
            order.append((r, node))

    gens = [rank_program(r) for r in range(len(graphs))]
    pending: dict[int, tuple[Node, tuple]] = {}

    def advance(r: int, send=None):
        try:
            pending[r] = gens[r].send(send) if send is not None or r in started else next(gens[r])
        except StopIteration:
            pending.pop(r, None)
        started.add(r)

    started: set[int] = set()
    channels: dict = {}
    for r in range(len(graphs)):
        advance(r)
    while pending:
        progressed = False
        for r in sorted(pending):
            if r not in pending:
                continue
            node, args = pending[r]
            if _is_p2p(node):
                out = _p2p_step(r, node, args, channels)
                if isinstance(out, CollectiveMismatch):
                    return LockstepResult(envs, out, order)
                if out is not None:
                    pending.pop(r)
                    advance(r, out)
                    progressed = True
                continue
            group = tuple(node.args[-1])
            if r not in group:
                return LockstepResult(envs, CollectiveMismatch([r], [node], f"rank {r} calls a collective on group {list(group)} that does not contain it"), order)
            if not all(g in pending and not _is_p2p(pending[g][0]) and tuple(pending[g][0].args[-1]) == group
                       for g in group):
                continue
            members = [pending[g] for g in group]
            defective = [(g, m[0]) for g, m in zip(group, members) if m[0].defects]
            if defective:
                kind, message, hint = defective[0][1].defects[0]
                return LockstepResult(envs, CollectiveMismatch([g for g, _ in defective], [n for _, n in defective],
                                                               message, kind, hint), order)
            matched = _match(group, [m[0] for m in members], [m[1] for m in members])
            if isinstance(matched, str):
                return LockstepResult(envs, CollectiveMismatch(list(group), [m[0] for m in members], matched), order)
            outs = eval_collective([m[0] for m in members], [(m[1][0],) + matched for m in members])
            for g, out in zip(group, outs):
                pending.pop(g)
                advance(g, out if out is not None else 0)
            progressed = True
        if not progressed:
            blocked = sorted(pending)
            message = "collectives never complete (deadlock): " + ", ".join(
                f"rank {r} waits in {pending[r][0].name} on {_where(pending[r][0])}" for r in blocked)
            stray = _unreceived(channels)
            if any(_is_p2p(pending[r][0]) for r in blocked):  # a recv whose peer never sends
                blocked = [r for r in blocked if _is_p2p(pending[r][0])]
                return LockstepResult(envs, CollectiveMismatch(
                    blocked, [pending[r][0] for r in blocked], message + (f"; {stray.message}" if stray else ""),
                    "p2p-mismatch", "a recv waits for a send its peer never issues: check the peer ranks (and tags) "
                    "of the point-to-point ops on both ends"), order)
            return LockstepResult(envs, CollectiveMismatch(blocked, [pending[r][0] for r in blocked], message), order)
    return LockstepResult(envs, _unreceived(channels), order)
