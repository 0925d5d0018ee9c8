"""Localization: the first distributed tensor whose relation to the single-device program
breaks, the op to blame for it (an earlier slice, view or operand when the break shows
later), and the finding reported there, its class refined by what the tensor feeds. Pure
functions over the relation status (``engine.status``); no I/O."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..algebra.layout import Val
from ..ir.graph import DistributedProgram, Graph, Node
from ..relations.spec import chunk_bounds
from .causes import (autograd_accumulation, completes, gradient_accumulation_blame, misshaped_view, partial_origin,
                     view_blame)
from .diagnose import SLICING_OPS, _src, diagnose
from .local import local_instance
from .lockstep import _reach
from .result import Finding
from .status import Related, _seq_counterpart, _status, in_order, positions_in, reorders
from .symbolic import SymbolicRun

if TYPE_CHECKING:  # annotations only
    from .verify import Relater


PARTIAL_KINDS = ("partial-sum-never-reduced", "nonlinearity-on-partial")


def _refine(finding: Finding, dist: DistributedProgram, status: list, gradients: frozenset) -> Finding:
    """Name the bug class from what the broken tensor feeds: a partial sum plus a term every
    rank holds whole, summed by an all_reduce later, counts that term once per rank; a
    partial sum used where only gradients (or the updates made of them) depend on it is a
    gradient reduction that is missing or comes too late -- so is a share of a reduction
    (one data-parallel group's rows of a gradient sum, a partial sum over part of the mesh)
    used as the whole there."""
    g = dist.graphs[finding.rank[0]]
    if not g.has(finding.node):
        return finding
    kinds = {rel.kind for rel in (status[finding.rank[0]].get(x) for x in g.node(finding.node).inputs) if rel}
    share_used = finding.kind == "value-mismatch" and "piece" in kinds
    if finding.kind not in PARTIAL_KINDS and not share_used:
        return finding
    users = g.users()
    reached = _reach([g.node(finding.node)], lambda m: users[m])
    summed_later = [n for n in reached if n.op == "_c10d_functional.all_reduce" and n.args[1] in ("sum", "avg")
                    and completes(n)]
    if not share_used and finding.op in ("aten.add", "aten.sub") and {"partial", "held"} <= kinds and summed_later:
        finding.kind = "replicated-counted-per-rank"
        finding.hint = (f"this adds a term every rank holds whole to a partial sum, and the all_reduce at "
                        f"{summed_later[0].name} then counts that term once per rank: add it on one rank only, or "
                        f"after the reduction" + (f" ({finding.source})" if finding.source else ""))
        return finding
    outputs = {name for name, n in g.outputs.items() if n in reached}
    if gradients and outputs and outputs <= gradients:
        finding.kind = "missing-gradient-reduction"
        origin = partial_origin(g.node(finding.node), status[finding.rank[0]]) \
            if autograd_accumulation(g.node(finding.node)) else None
        if origin is not None:  # a gradient accumulation (no forward line): blame the backward op of the share
            prefix, finding.hint = gradient_accumulation_blame(origin)
            finding.message = f"{prefix}; {finding.message}"
            finding.node, finding.op, finding.source = origin.name, origin.op, _src(origin)
            finding.expected, finding.counterpart = f"all_reduce(sum) of {origin.name} over the group", None
            return finding
        finding.hint = ("gradients (or a norm of them) are used while still partial sums over the ranks: "
                        "all_reduce(sum) them over the group that holds the pieces before this op -- for an "
                        "activation's gradient, the tensor-parallel group in the backward (Megatron's f operator, "
                        "where the activation enters the tensor-parallel layers, all-reduces its gradient in its "
                        "backward); for parameters' gradients, the data-parallel group in the step"
                        + (f" (at {finding.source})" if finding.source else ""))
    return finding


@dataclass
class Localized:
    """Where a violation is reported (`node`, on `ranks`) and the first tensor whose
    relation breaks (`broken`, where the evidence is); they differ when an earlier op is
    to blame (`blame` says why)."""
    node: Node
    ranks: list
    status: list
    broken: Node
    blame: Optional[str] = None
    recovers: bool = False  # a later tensor relates again: `broken` may be a legitimate intermediate
    blamed_as: tuple = ("wrong-shard-offset", "each rank's own chunk (the pieces tile the dim)",
                        "overlapping pieces", "cut each rank's piece at its own offset (rank r: the r-th chunk)")
    """(kind, expected, actual, hint) of a finding at `node` when `blame` is set."""
    counterpart: Optional[str] = None  # with `blame`: the single-device tensor `node` relates to, if any


def _collective(node: Node) -> bool:
    return node.op.startswith("_c10d_functional.") and node.op != "_c10d_functional.wait_tensor"


def _rescales(node: Node, rel: Optional[Related], input_rels: list) -> bool:
    """Whether `node` multiplies or divides a multiple of a value by a constant, changing
    its factor (an average's division, a micro-batch rescaling)."""
    return rel is not None and rel.kind == "scaled" and node.op in ("aten.mul", "aten.div") \
        and len(input_rels) == 1 and input_rels[0].factor != rel.factor


def _localize(run: SymbolicRun, relater: Relater, seq: Graph, dist: DistributedProgram, broken: list[str]):
    """The first distributed tensors (with their ranks) whose relation breaks."""
    status = _status(run, relater, dist)
    found: dict[str, tuple[Node, list[int], bool, tuple[int, int]]] = {}  # name -> (node, ranks, recovers, (epoch, i))
    # a tensor every rank relates exactly to the single-device program (not a constant: one
    # rank's offset may be 0; its elements in order): where a legitimate rank-local
    # intermediate's dataflow relates again
    names = set.intersection(*({n.name for n, rel in st.items()
                                if rel is not None and rel.kind not in ("const", "local", "scaled", "piece", "packed", "softmax-state")
                                and in_order(rel.positions)} for st in status))
    rescalings = []
    for r, g in enumerate(dist.graphs):
        users = g.users()
        targets = [g.outputs[o] for o in broken if o in g.outputs]
        ancestors = _reach(targets, lambda n: list(n.inputs))
        epoch = 0  # collectives so far: the k-th synchronizes the ranks, so order across ranks by it first
        for i, n in enumerate(g.nodes):
            epoch += _collective(n)
            rel = status[r].get(n)
            if n not in status[r] or n not in ancestors:
                continue
            if rel is not None and rel.exact and not (rel.kind == "piece" and _collective(n)) \
                    and not reorders(n, rel, status[r]):
                continue  # related; a collective that leaves a mere share of a reduction is suspect
            input_rels = [status[r].get(x) for x in _operands(n, status[r])]
            if not all(x is not None for x in input_rels):
                continue
            if not all(x.exact for x in input_rels):
                # from a multiple of a value: only a re-scaling the single-device program does not do
                if not _rescales(n, rel, input_rels) or _seq_counterpart(run.seq, n, [status[r].get(x) for x in n.inputs]) is not None:
                    continue
                rescalings.append((r, n.name))
            recovers = any(d.name in names for d in _reach([n], lambda m: _dataflow_users(users, status[r], m))
                           if d is not n)
            key = n.name
            if key in found:
                found[key][1].append(r)
            else:
                found[key] = (n, [r], recovers, (epoch, i))
    for r, m in rescalings:  # a multiple re-scaled wrongly later: blame the re-scaling, not where it began
        g = dist.graphs[r]
        users = g.users()
        for name, f in list(found.items()):
            if name != m and not f[2] and g.has(name) and g.node(m) in _reach([g.node(name)], lambda x: users[x]):
                del found[name]
    misrouted = None if found else _misrouted_output(run, relater, seq, dist, broken, status)
    if misrouted is not None:
        return misrouted
    if min((f[2] for f in found.values()), default=True):
        # every unrelated tensor relates again later: the break is an output held wrongly
        wrong = _related_wrongly(dist, status, broken)
        if wrong is not None:
            reordering = next(((f[0], f[1]) for f in sorted(found.values(), key=lambda f: f[3])
                               if _feeds_out_of_order(f[0], dist.graphs[f[1][0]].users(), status[f[1][0]])), wrong)
            return Localized(reordering[0], reordering[1], status, reordering[0], recovers=False)
    if not found:
        return None
    n, ranks, recovers, _ = min(found.values(), key=lambda f: (f[2], f[3]))
    culprit = _misaligned_slice(n, status[ranks[0]])
    if culprit is not None:
        return Localized(culprit, ranks, status, culprit, recovers=recovers)
    misrouted = _misrouted_operand(run, relater, seq, dist, n, ranks[0], status[ranks[0]])
    if misrouted is not None:
        culprit, why = misrouted
        return Localized(culprit, ranks, status, n, why, recovers,
                         ("wrong-shard-offset", "the elements the single-device program's op takes", "other elements",
                          "take the same elements as the single-device program (check the offsets)"))
    overlapping = _overlapping_slice(dist, status, _reach([n], lambda m: list(m.inputs)))
    if overlapping is not None:
        return Localized(*overlapping[:2], status, n, overlapping[2], recovers)
    view = misshaped_view(n, _operands(n, status[ranks[0]]), status[ranks[0]], run.seq)
    if view is not None:  # the op reads a view sized unlike the single-device one: blame the view
        blame, blamed_as, counterpart = view_blame(*view)
        return Localized(view[0], ranks, status, n, blame, recovers, blamed_as, counterpart)
    return Localized(n, ranks, status, n, recovers=recovers)


def _dataflow_users(users: dict, status: dict, node: Node) -> list:
    """The users of `node` whose values depend on its value: a constant made from it (a
    ``ones_like`` seeding the backward) takes only its shape, so no dataflow passes there."""
    return [u for u in users[node] if status.get(u) is None or status[u].kind != "const"]


def _operands(node: Node, status: dict) -> list[Node]:
    """`node`'s tensor inputs; for one output of a multi-output op (a getitem), that op's:
    the op, not the selection of its output, is what may break a relation."""
    inputs = list(node.inputs)
    if node.op == "getitem" and len(inputs) == 1 and inputs[0] not in status:
        inputs = list(inputs[0].inputs)
    return [x for x in inputs if x in status]


def _feeds_out_of_order(node: Node, users: dict, status: dict) -> bool:
    """Whether the first related tensors `node` feeds (past unrelated ones) hold their
    single-device elements out of order: `node` scrambled a layout (a collective gathering
    along the wrong dim) that a later view made relate again, permuted."""
    stack, seen = list(users[node]), set()
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        rel = status.get(m)
        if rel is None:
            stack.extend(users[m])
        elif rel.kind == "held" and not in_order(rel.positions):
            return True
    return False


def _related_wrongly(dist: DistributedProgram, status: list, broken: list[str]):
    """The first broken output that every rank holds in *some* relation (not the one
    expected, e.g. a partial sum never reduced), with its ranks; else None."""
    for o in broken:
        nodes = [g.outputs.get(o) for g in dist.graphs]
        if all(n is not None and status[r].get(n) is not None for r, n in enumerate(nodes)):
            node = nodes[0]
            while node.op in ("aten.alias", "aten.detach") and node.args and isinstance(node.args[0], Node):
                node = node.args[0]  # name the op that produced it
            return node, list(range(len(nodes)))
    return None


def _holds_inside(terms, env: dict, senv: dict):
    """``inside(x, s)``: whether distributed node x holds elements of single-device node s."""
    def inside(x: Node, s: Node) -> bool:
        dv, sv = env.get(x), senv.get(s)
        return isinstance(dv, Val) and isinstance(sv, Val) and dv.t == sv.t and positions_in(terms, sv, dv) is not None
    return inside


def _misrouted_operand(run: SymbolicRun, relater: Relater, seq: Graph, dist: DistributedProgram, node: Node,
                       rank: int, status: dict):
    """An op whose operands all relate to the single-device program, but one of them to
    another tensor than the single-device op reads (a key projection cut from the query
    columns): walk that operand back in step with the single-device program's operand,
    op by op, to the first op that reads what its counterpart reads and yields other
    elements. Returns (that node, why) or None."""
    inside = _holds_inside(relater.terms, run.dist[rank], run.seq)
    operands = [x for x in node.inputs if x in status]
    if not operands or any(status[x] is None for x in operands):
        return None
    best, score = None, 0
    for s in seq.nodes:  # the single-device op of the same kind reading most of the same operands
        if s.op != node.op or len(list(s.inputs)) != len(list(node.inputs)):
            continue
        hits = sum(inside(x, y) for x, y in zip(node.inputs, s.inputs))
        if hits > score:
            best, score = s, hits
    if best is None or score == len(list(node.inputs)):
        return None
    x, s = next((x, y) for x, y in zip(node.inputs, best.inputs) if not inside(x, y))
    return _walk_back(run, relater, dist, rank, status, x, s)


def _walk_back(run: SymbolicRun, relater: Relater, dist: DistributedProgram, rank: int, status: dict, x: Node,
               s: Node):
    """From a distributed tensor `x` holding elements of another single-device tensor than
    its counterpart `s`, back through the ops both programs apply alike, to the first op
    whose inputs hold what its counterpart's inputs hold: (that node, why), or None."""
    env, senv = run.dist[rank], run.seq
    terms = relater.terms
    inside = _holds_inside(terms, env, senv)
    for _ in range(len(dist.graphs[rank].nodes)):
        held_elsewhere = status.get(x) is not None and status[x].kind in ("held", "view")  # of another tensor
        if not held_elsewhere or x.op != s.op or x.op in ("input", "constant"):
            return None
        pairs = list(zip(x.inputs, s.inputs))
        if len(pairs) != len(list(x.inputs)) or len(pairs) != len(list(s.inputs)):
            return None
        off = [(a, b) for a, b in pairs if not inside(a, b)]
        if not off:
            return x, _takes_other(terms, env, senv, x, s, pairs)
        x, s = off[0]
    return None


def _misrouted_output(run, relater, seq, dist, broken: list[str], status: list):
    """An output that holds elements of another single-device tensor than the expected
    one (every tensor on the way relates to something): blame the first op that took them."""
    for name in broken:
        for r, g in enumerate(dist.graphs):
            x, s = g.outputs.get(name), seq.outputs.get(name)
            if x is None or s is None:
                continue
            while x.op == s.op and x.op in ("aten.alias", "getitem") and x.args and isinstance(x.args[0], Node):
                x, s = x.args[0], s.args[0]
            misrouted = _walk_back(run, relater, dist, r, status[r], x, s)
            if misrouted is not None:
                ranks = [q for q, h in enumerate(dist.graphs) if status[q].get(h.outputs.get(name)) is not None]
                node, why = misrouted
                return Localized(node, ranks or [r], status, g.outputs[name], why, False,
                                 ("wrong-shard-offset", "the elements the single-device program's op takes",
                                  "other elements", "take the same elements as the single-device program "
                                                    "(check the offsets)"))
    return None


def _takes_other(terms, env, senv, x: Node, s: Node, pairs) -> str:
    """Which elements of its input `x` takes on this rank, against what `s` takes."""
    a, b = pairs[0]
    got = positions_in(terms, senv[b], env[x]) if isinstance(env.get(x), Val) else None
    want = positions_in(terms, senv[b], senv[s]) if isinstance(senv.get(s), Val) else None
    parts = []
    if got is not None and want is not None:
        for d, (g, w) in enumerate(zip(got, want)):
            if g is None and w is None or (g is not None and w is not None and np.array_equal(g, w)):
                continue
            size = b.shape[d]
            parts.append(f"dim {d}: it takes {_span(np.arange(size) if g is None else g)} of {b.name} where the "
                         f"single-device {s.name} takes {_span(np.arange(size) if w is None else w)}")
    detail = "; ".join(parts) or "other elements than the single-device op"
    return f"it reads the same tensor as the single-device {s.name} but {detail}"


def _misaligned_slice(node: Node, status: dict) -> Optional[Node]:
    """An elementwise op whose operands are each related, but at different positions on
    an aligned dim: the operand cut by a slicing op is at the wrong offset (e.g. one
    rank slicing a replicated RoPE table from the wrong start)."""
    from ..ops.common import elementwise_shape
    from ..ops.registry import lookup
    opdef = lookup(node.op)
    if opdef is None or opdef.shape is not elementwise_shape:
        return None
    rels = [(x, status.get(x)) for x in node.inputs]
    rels = [(x, r) for x, r in rels if r is not None and r.positions is not None and r.kind == "held"]
    for a, ra in rels:
        for b, rb in rels:
            if a is b or b.op not in SLICING_OPS:
                continue
            for pa, pb in zip(reversed(ra.positions), reversed(rb.positions)):
                if pa is not None and pb is not None and len(pa) == len(pb) and not np.array_equal(pa, pb):
                    return b
                if (pa is None) != (pb is None) and a.op not in SLICING_OPS:
                    return b
    return None


def _overlapping_slice(dist: DistributedProgram, status: list, ancestors: set):
    """A slicing op whose pieces overlap across ranks where they should tile the dim (a
    sequence-parallel scatter cut at the wrong offset on one rank): the pieces of a
    replicated tensor either repeat the same rows everywhere or partition them. Blames
    the ranks whose piece is not its chunk."""
    names = {n.name for n in ancestors}
    for n in dist.graphs[0].nodes:
        if n.op not in SLICING_OPS or n.name not in names or not all(g.has(n.name) for g in dist.graphs):
            continue
        rels = [status[q].get(g.node(n.name)) for q, g in enumerate(dist.graphs)]
        if any(rel is None or rel.positions is None or rel.kind != "held" for rel in rels):
            continue
        dims = {d for rel in rels for d, p in enumerate(rel.positions) if p is not None}
        if len(dims) != 1:
            continue
        d = dims.pop()
        size = rels[0].seq_node.shape[d]
        pieces = [np.arange(size) if rel.positions[d] is None else rel.positions[d] for rel in rels]
        allpos = np.concatenate(pieces)
        if len(np.unique(allpos)) == len(allpos) or all(np.array_equal(p, pieces[0]) for p in pieces):
            continue
        world = dist.world_size
        bad = [q for q, p in enumerate(pieces) if not np.array_equal(p, np.arange(*chunk_bounds(size, world, q)))]
        bad = bad or list(range(world))
        spans = "; ".join(f"rank {q} takes {_span(pieces[q])}, its chunk is "
                          f"{_span(np.arange(*chunk_bounds(size, world, q)))}" for q in bad)
        return (dist.graphs[bad[0]].node(n.name), bad,
                f"the ranks' pieces of dim {d} of {rels[0].seq_node.name} overlap instead of tiling it ({spans})")
    return None


def _span(p: np.ndarray) -> str:
    contiguous = len(p) and np.array_equal(p, np.arange(p[0], p[0] + len(p)))
    return f"[{p[0]}:{p[0] + len(p)})" if contiguous else f"{len(p)} positions"
    return None


def _local_finding(run, relater, seq, dist, broken: list[str], expect: dict,
                   loc: Optional[Localized]) -> Optional[Finding]:
    """A finding backed by local evidence (see ``engine.local``): at the first broken
    tensor (`loc`), or at an output proven to hold another relation than the expected one
    (a partial sum where a replicated value was expected)."""
    candidates = []
    status = loc.status if loc is not None else _status(run, relater, dist)
    if loc is not None and not loc.recovers:  # evidence only where the difference reaches the outputs
        ranks = loc.ranks if loc.blame is None else list(range(dist.world_size))
        ranks = [r for r in ranks if dist.graphs[r].has(loc.broken.name)] or loc.ranks  # rank-dependent code
        candidates.append((Localized(loc.broken, ranks, status, loc.broken), None, loc))
    for name in broken:
        nodes = [g.outputs.get(name) for g in dist.graphs]
        if expect.get(name) is not None and all(n is not None and status[r].get(n) is not None
                                                for r, n in enumerate(nodes)):
            at = Localized(nodes[0], list(range(dist.world_size)), status, nodes[0])
            candidates.append((at, expect[name], at))
    for at, expected, report_at in candidates:
        found = local_instance(run, seq, dist, at.node, at.ranks, status, expected)
        if found is None:
            continue
        finding = diagnose(run, relater, seq, dist, at.node, at.ranks, status, found.inputs, found.s_env,
                           found.d_envs, expected=None if expected is None else str(expected),
                           cex=found.counterexample)
        return _report_at(finding, report_at)
    return None


def _report_at(finding: Finding, loc: Localized) -> Finding:
    """Name the op to blame: the producer of a multi-output op's broken output, or an
    earlier op whose effect the broken tensor shows."""
    node = loc.node
    if loc.blame is not None:
        finding.message = f"{node.name} = {node.op}(...) on rank(s) {', '.join(map(str, loc.ranks))}: {loc.blame}; " \
                          f"the first tensor that shows it is {loc.broken.name}: {finding.message}"
        kind, expected, actual, hint = loc.blamed_as
        finding.kind, finding.rank = kind, loc.ranks
        finding.expected, finding.actual = expected, actual
        finding.hint = hint + (f" at {node.source}" if node.source else "")
        finding.node, finding.op, finding.source = node.name, node.op, _src(node)
        finding.counterpart = loc.counterpart  # the broken tensor's counterpart is not the blamed op's
    _name_producer(finding, node)
    return finding


def _name_producer(finding: Finding, node: Node) -> None:
    if node.op == "getitem" and node.args and isinstance(node.args[0], Node):
        producer = node.args[0]  # one output of a multi-output op: name the op that broke
        finding.node, finding.op, finding.source = producer.name, producer.op, _src(producer) or finding.source


def _findings(run, relater, seq, dist, differing, s_in, s_env, d_envs, gradients=frozenset()) -> list[Finding]:
    loc = _localize(run, relater, seq, dist, differing)
    if loc is None:
        name = differing[0]
        dnode = dist.graphs[0].outputs.get(name)
        status = _status(run, relater, dist)
        rel = status[0].get(dnode) if dnode is not None else None
        if rel is not None and rel.kind == "partial":  # every tensor relates, the output only as a partial sum
            while dnode.op == "aten.alias" and isinstance(dnode.args[0], Node):
                dnode = dnode.args[0]  # name the op that produced it
            return [Finding("partial-sum-never-reduced", list(range(dist.world_size)), dnode.name, dnode.op,
                            _src(dnode), "recoverable as expected", rel.describe(),
                            f"output {name} ({dnode.name}) holds on each rank a share whose {rel.partial} over the "
                            f"ranks is the single-device {rel.seq_node.name}: no collective combines them",
                            f"all-reduce ({rel.partial}) {dnode.name} across the ranks before it is returned")]
        return [Finding("output-mismatch", list(range(dist.world_size)), dnode.name if dnode else name,
                        dnode.op if dnode else "?", _src(dnode) if dnode else None, "recoverable",
                        "a different relation", f"output {name} does not relate to the single-device output as expected")]
    ranks = loc.ranks if loc.blame is None else list(range(dist.world_size))
    ranks = [r for r in ranks if dist.graphs[r].has(loc.broken.name)] or loc.ranks  # rank-dependent code
    evidence_ranks = [r for r in ranks if loc.status[r].get(dist.graphs[r].node(loc.broken.name)) is None] or ranks
    finding = diagnose(run, relater, seq, dist, loc.broken, evidence_ranks, loc.status, s_in, s_env, d_envs, differing)
    return [_refine(_report_at(finding, loc), dist, loc.status, gradients)]
