"""Proved fix suggestions (issue 17): for a violation's first finding, the minimal repairs
of the common bug classes -- a reduction inserted, removed or moved, a reduce op or group
changed, a scale undone, a constant, slice bound or view size set to its single-device
counterpart's -- each applied to a copy of the captured rank graphs (with the editing kit
of mutation testing, whose edits are the inverse of these) and re-verified by the same
engine entry point. A repair is offered only when the repaired program is *proved*
(verified by the rules, and numerically equal on random inputs); where no candidate
verifies, none is offered.

The search is time-boxed: a handful of candidates drawn from the finding's kind and the
nodes nearest to it, each a re-verification of already captured graphs.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from ..ir.graph import DistributedProgram, Graph, Node, TensorType, descendants
from .mutation_edits import COLLECTIVE, REDUCING, WAIT, _edit, _insert_after, _replace_uses, _set_arg
from .numeric import NumericError
from .result import Finding
from .verify import differing_outputs, verify_graphs

MAX_CANDIDATES = 24
MAX_PLACES = 8
BUDGET_SECONDS = 30.0
MIN_BUDGET = 10.0
RE_VERIFICATIONS = 5
NEAR = 6  # how many of the finding node's nearest ancestors a repair may edit
ALL_REDUCE = COLLECTIVE + "all_reduce"
SCALARS = (int, float)
INSERT_KINDS = ("partial-sum-never-reduced", "missing-gradient-reduction", "nonlinearity-on-partial",
                "broken-dataflow")
REMOVE_KINDS = ("reduced-twice", "scaling-mismatch", "replicated-counted-per-rank", "wrong-reduce-op")
SCALE_KINDS = ("scaling-mismatch", "wrong-normalization", "replicated-counted-per-rank", "wrong-reduce-op",
               "rank-specific-mismatch")
CONSTANT_KINDS = ("value-mismatch", "rank-specific-mismatch", "scaling-mismatch")
SLICE_KINDS = ("wrong-shard-offset", "value-mismatch", "rank-specific-mismatch")


@dataclass
class Repair:
    """A candidate repair: its class (insert-reduction, remove-reduction, move-reduction,
    reduce-op, group, scale, constant, slice, view), the one-line hunk shown to the user,
    the node it edits and the repaired program."""
    kind: str
    what: str
    node: str
    program: Optional[DistributedProgram]
    nodes: tuple = ()  # every node the repair edits (the same hunk, needed at several places)


# ---------------------------------------------------------------- where, in the user's words

def at(node: Node) -> str:
    """`line N of FILE (`code`)` for a node's source, else its name."""
    s = node.source
    if s is None:
        return f"node {node.name}"
    code = f" (`{s.code.strip()}`)" if s.code else ""
    return f"line {s.line} of {os.path.basename(s.file)}{code}"


def _on(f: Finding, dist: DistributedProgram) -> str:
    """` on rank(s) ...` for a repair of some ranks only; empty for all of them."""
    if sorted(f.rank) == list(range(dist.world_size)):
        return ""
    return f" on rank{'s' if len(f.rank) > 1 else ''} {', '.join(map(str, f.rank))}"


def _coll_name(coll: Node) -> str:
    op = coll.args[1] if len(coll.args) > 1 and isinstance(coll.args[1], str) else ""
    return f"{coll.op.split('.')[-1]}({op})"


# ---------------------------------------------------------------- graph neighbourhoods

def _near(graph: Graph, name: str, limit: int = NEAR) -> list[Node]:
    """The node named `name` and its nearest ancestors (breadth first), inputs excluded."""
    if not graph.has(name):
        return []
    out, todo = [], [graph.node(name)]
    while todo and len(out) < limit:
        n = todo.pop(0)
        if n in out or n.op in ("input", "constant"):
            continue
        out.append(n)
        todo.extend(n.inputs)
    return out


def _float_tensor(n: Node) -> bool:
    return isinstance(n.type, TensorType) and n.type.dtype.startswith(("f", "bf"))


def _wait_of(graph: Graph, coll: Node) -> Optional[Node]:
    return next((n for n in graph.nodes if n.op == WAIT and n.args and n.args[0] is coll), None)


def _reducing_near(graph: Graph, name: str) -> list[Node]:
    """Reducing collectives among the finding node and its ancestors (a wait stands for its
    collective), nearest first."""
    out = []
    for n in _near(graph, name, 2 * NEAR):
        c = n.args[0] if n.op == WAIT and n.args and isinstance(n.args[0], Node) else n
        if c.op in REDUCING and c not in out:
            out.append(c)
    return out


def _downstream_reductions(graph: Graph, node: Node) -> list[Node]:
    """All_reduce collectives that read `node`, directly or through later nodes."""
    return [u for u in descendants(node, graph.users()) if u.op == ALL_REDUCE and u.args[1] == "sum"]


# ---------------------------------------------------------------- edits

def _insert_reduction(g: Graph, name: str, op: str, group: tuple) -> None:
    x = g.node(name)
    coll = Node(f"{name}_fix_all_reduce", ALL_REDUCE, (x, op, group), {}, x.type, x.source)
    _insert_after(g, x, [coll, Node(f"{name}_fix_wait", WAIT, (coll,), {}, x.type, x.source)])


def _remove_reduction(g: Graph, coll_name: str) -> Optional[bool]:
    """The collective and its wait dropped: the wait's readers read the collective's input."""
    coll = g.node(coll_name)
    wait = _wait_of(g, coll)
    if wait is None:
        return False
    src = coll.args[0]
    if coll.op != ALL_REDUCE or not isinstance(src, Node):
        return False
    _replace_uses(g, wait, src, g.nodes.index(wait))
    g.nodes.remove(wait)
    g.nodes.remove(coll)
    return None


def _scale_after(g: Graph, name: str, factor: float) -> None:
    x = g.node(name)
    _insert_after(g, x, [Node(f"{name}_fix_scaled", "aten.mul", (x, factor), {}, x.type, x.source)])


def _factors(world: int) -> list[float]:
    """Scale factors a wrong scale is likely off by: the world size (a sum over ranks
    counted as a mean, or the reverse) and 2 (a half-size group, e.g. dp of dp x tp)."""
    return list(dict.fromkeys((world, 1 / world, 2, 1 / 2)))


def _scalar_positions(n: Node) -> list[int]:
    return [i for i, a in enumerate(n.args) if isinstance(a, SCALARS) and not isinstance(a, bool)]


# ---------------------------------------------------------------- candidates

def _groups(dist: DistributedProgram, rank: int) -> list[tuple]:
    """Process groups to try on `rank`: all ranks, then the groups its collectives use."""
    found = [tuple(range(dist.world_size))]
    for n in dist.graphs[rank].nodes:
        if n.op.startswith(COLLECTIVE) and n.op != WAIT and n.args and isinstance(n.args[-1], (tuple, list)):
            g = tuple(n.args[-1])
            if rank in g and g not in found:
                found.append(g)
    return found


def _every(dist: DistributedProgram) -> range:
    return range(dist.world_size)


def _insert_candidates(seq: Graph, dist: DistributedProgram, f: Finding) -> Iterator[Repair]:
    if f.kind not in INSERT_KINDS or sorted(f.rank) != list(_every(dist)):
        return
    g0 = dist.graphs[0]
    targets = [n for n in _near(g0, f.node) if _float_tensor(n) and n.op not in (WAIT, ALL_REDUCE)]
    ops = ("sum", "avg") if f.kind == "missing-gradient-reduction" else ("sum",)
    for x in targets[1:] + targets[:1]:  # an operand first: the finding's node reads the partial sum
        for gi in range(len(_groups(dist, 0))):
            for op in ops:
                def insert(g, r, name=x.name, op=op, gi=gi):
                    groups = _groups(dist, r)
                    if gi >= len(groups):
                        return False
                    _insert_reduction(g, name, op, groups[gi])
                group = _groups(dist, 0)[gi]
                over = "" if gi == 0 else f" over ranks {group}"
                yield Repair("insert-reduction", f"insert `all_reduce({op})`{over} after {at(x)}", x.name,
                             _edit(dist, _every(dist), insert))
                if f.kind == "nonlinearity-on-partial":
                    for later in _downstream_reductions(g0, x)[:1]:
                        def move(g, r, name=x.name, op=op, gi=gi, later=later.name):
                            if insert(g, r, name, op, gi) is False:
                                return False
                            return _remove_reduction(g, later)
                        yield Repair("move-reduction", f"move `{_coll_name(later)}` from {at(later)} to after "
                                     f"{at(x)}", x.name, _edit(dist, _every(dist), move))


def _remove_candidates(seq: Graph, dist: DistributedProgram, f: Finding) -> Iterator[Repair]:
    if f.kind not in REMOVE_KINDS:
        return
    for coll in _reducing_near(dist.graphs[f.rank[0]], f.node):
        if coll.op != ALL_REDUCE:
            continue
        yield Repair("remove-reduction", f"remove `{_coll_name(coll)}` at {at(coll)}", coll.name,
                     _edit(dist, _every(dist), lambda g, r, name=coll.name: _remove_reduction(g, name)))


def _reduce_op_candidates(seq: Graph, dist: DistributedProgram, f: Finding) -> Iterator[Repair]:
    if f.kind not in ("wrong-reduce-op", "scaling-mismatch"):
        return
    for coll in _reducing_near(dist.graphs[f.rank[0]], f.node)[:2]:
        for op in ("sum", "avg"):
            if coll.args[1] == op:
                continue
            yield Repair("reduce-op", f"reduce with `{op}` instead of `{coll.args[1]}` at {at(coll)}", coll.name,
                         _edit(dist, _every(dist), lambda g, r, name=coll.name, op=op: _set_arg(g.node(name), 1, op)))


def _group_candidates(seq: Graph, dist: DistributedProgram, f: Finding) -> Iterator[Repair]:
    if f.kind not in ("wrong-group", "scaling-mismatch", "missing-gradient-reduction", "wrong-reduce-op"):
        return
    for coll in _reducing_near(dist.graphs[f.rank[0]], f.node)[:2]:
        have = tuple(coll.args[-1])
        for gi, group in enumerate(_groups(dist, f.rank[0])):
            if group == have:
                continue

            def regroup(g, r, name=coll.name, gi=gi):
                groups = _groups(dist, r)
                if gi >= len(groups):
                    return False
                c = g.node(name)
                _set_arg(c, len(c.args) - 1, groups[gi])
            yield Repair("group", f"reduce over ranks {group} instead of {have} at {at(coll)}", coll.name,
                         _edit(dist, _every(dist), regroup))


def _scale_candidates(seq: Graph, dist: DistributedProgram, f: Finding) -> Iterator[Repair]:
    if f.kind not in SCALE_KINDS:
        return
    world = dist.world_size
    g = dist.graphs[f.rank[0]]
    if not g.has(f.node) or not _float_tensor(g.node(f.node)):
        return
    node = g.node(f.node)
    for c in _factors(world):
        factor, words = float(c), f"multiply by {int(c)}" if c >= 1 else f"divide by {round(1 / c)}"
        yield Repair("scale", f"{words}{_on(f, dist)} after {at(node)}", node.name,
                     _edit(dist, f.rank, lambda g, r, name=node.name, c=factor: _scale_after(g, name, c)))


def _siblings(g: Graph, node: Node) -> list[str]:
    """Names of the nodes of `g` made by the same op, at the same source line, with the same
    constant arguments as `node` (one constant of the user's program used several times,
    e.g. a norm's eps in every layer): a repair of the constant edits them all."""
    def key(n):
        return n.op, n.source, [a for a in n.args if not isinstance(a, Node)]
    k = key(node)
    return [n.name for n in g.nodes if key(n) == k] if node.source is not None else [node.name]


def _donor(dist: DistributedProgram, seq: Graph, donor, name: str) -> Optional[Node]:
    g = seq if donor == "seq" else dist.graphs[donor]
    return g.node(name) if g.has(name) else None


def _scalar_kwargs(n: Node) -> dict:
    return {k: v for k, v in n.kwargs.items() if v is None or (isinstance(v, SCALARS) and not isinstance(v, bool))}


def _keyword_constants(dist: DistributedProgram, f: Finding, n: Node, s: Node, label: str) -> Iterator[Repair]:
    """`n`'s scalar keyword arguments (e.g. an attention's ``scale=``) set to donor `s`'s."""
    mine, theirs = _scalar_kwargs(n), _scalar_kwargs(s)
    if mine == theirs:
        return
    words = ", ".join([f"use `{k}={theirs[k]!r}` instead of {mine.get(k)!r}" for k in theirs
                       if theirs[k] != mine.get(k)] + [f"drop `{k}={mine[k]!r}`" for k in mine if k not in theirs])

    def set_kwargs(g, r, name=n.name):
        for sib in _siblings(g, g.node(name)):
            x = g.node(sib)
            x.kwargs = {**{k: v for k, v in x.kwargs.items() if k not in mine}, **theirs}
    yield Repair("constant", f"{words} (as {label} does){_on(f, dist)} at {at(n)}", n.name,
                 _edit(dist, f.rank, set_kwargs))


def _constant_candidates(seq: Graph, dist: DistributedProgram, f: Finding) -> Iterator[Repair]:
    """A node's scalar constants (and its siblings') set to the single-device counterpart's
    (all ranks wrong) or to another rank's (one rank wrong); a scaling's constant scaled by
    the world size."""
    if f.kind not in CONSTANT_KINDS:
        return
    g = dist.graphs[f.rank[0]]
    others = [r for r in _every(dist) if r not in f.rank]
    for n in _near(g, f.node, 3):
        pos = _scalar_positions(n)
        for donor in (others[:1] or ["seq"]):
            s = _donor(dist, seq, donor, n.name)
            if s is None and donor == "seq" and n.name == f.node and f.counterpart:
                s = _donor(dist, seq, donor, f.counterpart)
            if s is None or s.op != n.op:
                continue
            label = "the single-device program" if donor == "seq" else f"rank {donor}"
            yield from _keyword_constants(dist, f, n, s, label)
            if not pos or _scalar_positions(s) != pos or [s.args[i] for i in pos] == [n.args[i] for i in pos]:
                continue

            def set_constants(g, r, name=n.name, new=[s.args[i] for i in pos], pos=pos):
                for sib in _siblings(g, g.node(name)):  # one source line: its constant, wherever it is used
                    for i, v in zip(pos, new):
                        _set_arg(g.node(sib), i, v)
            old = ", ".join(repr(n.args[i]) for i in pos)
            yield Repair("constant", f"use {', '.join(repr(s.args[i]) for i in pos)} (as {label} does) instead of "
                         f"{old}{_on(f, dist)} at {at(n)}", n.name, _edit(dist, f.rank, set_constants))
        if f.kind == "scaling-mismatch" and n.op in ("aten.mul", "aten.div"):
            world = dist.world_size
            for i in pos:
                for c in _factors(world):
                    v = n.args[i] * c
                    yield Repair("scale", f"use {v!r} instead of {n.args[i]!r}{_on(f, dist)} at {at(n)}", n.name,
                                 _edit(dist, f.rank, lambda g, r, name=n.name, i=i, c=c: [
                                     _set_arg(g.node(x), i, g.node(x).args[i] * c)
                                     for x in _siblings(g, g.node(name))]))


def _slice_candidates(seq: Graph, dist: DistributedProgram, f: Finding) -> Iterator[Repair]:
    """A slice's bounds shifted to its rank's block: the block its peers' slices leave
    (rank r of equal blocks: [r*L, (r+1)*L)), or the single-device slice's bounds."""
    if f.kind not in SLICE_KINDS:
        return
    g = dist.graphs[f.rank[0]]
    for n in _near(g, f.node, 2 * NEAR):
        if n.op != "aten.slice" or len(n.args) < 4 or not all(isinstance(a, int) for a in n.args[1:4]):
            continue
        src, dim, start, stop = n.args[:4]
        stop = min(stop, src.type.shape[dim]) if isinstance(src, Node) and isinstance(src.type, TensorType) else stop
        length = stop - start
        if length <= 0:
            continue
        options = {}
        for r in f.rank:
            options.setdefault("block", {})[r] = r * length
        if seq.has(n.name) and seq.node(n.name).op == "aten.slice" and isinstance(seq.node(n.name).args[2], int):
            options["seq"] = {r: seq.node(n.name).args[2] for r in f.rank}
        for how, starts in options.items():
            if all(starts[r] == dist.graphs[r].node(n.name).args[2] for r in f.rank if dist.graphs[r].has(n.name)):
                continue

            def shift(g, r, name=n.name, starts=starts):
                for sib in _siblings(g, g.node(name)):
                    s = g.node(sib)
                    width = min(s.args[3], s.args[0].type.shape[s.args[1]]) - s.args[2]
                    _set_arg(s, 2, starts[r])
                    _set_arg(s, 3, starts[r] + width)
            bounds = ", ".join((f"rank {r}: " if len(f.rank) > 1 else "") + f"[{starts[r]}:{starts[r] + length})"
                               for r in f.rank)
            yield Repair("slice", f"slice dim {dim} as {bounds} instead of [{start}:{stop}){_on(f, dist)} at {at(n)}",
                         n.name,
                         _edit(dist, f.rank, shift))


def _view_candidates(seq: Graph, dist: DistributedProgram, f: Finding) -> Iterator[Repair]:
    """A view's sizes scaled along one dim by the world size (a view given the global size
    of a sharded dim, or the reverse), where the element count allows it."""
    if f.kind not in ("value-mismatch", "wrong-dim", "wrong-shard-offset"):
        return
    g = dist.graphs[f.rank[0]]
    world = dist.world_size
    for n in _near(g, f.node, 3):
        if n.op not in ("aten.view", "aten.reshape", "aten._unsafe_view") or len(n.args) < 2:
            continue
        sizes = list(n.args[1])
        if -1 not in sizes:
            continue
        for d, s in enumerate(sizes):
            for new in (s * world, s // world if s % world == 0 else None):
                if s == -1 or not new:
                    continue
                size = sizes[:d] + [new] + sizes[d + 1:]

                def resize(g, r, name=n.name, size=size):
                    v = g.node(name)
                    known = 1
                    for x in size:
                        known *= x if x != -1 else 1
                    if v.args[0].type.numel % known:
                        return False
                    shape = tuple(x if x != -1 else v.args[0].type.numel // known for x in size)
                    _set_arg(v, 1, list(size))
                    v.type = TensorType(shape, v.type.dtype)
                yield Repair("view", f"view as {size} instead of {sizes} at {at(n)}", n.name,
                             _edit(dist, f.rank, resize))


GENERATORS: tuple[Callable[..., Iterator[Repair]], ...] = (
    _remove_candidates, _reduce_op_candidates, _insert_candidates, _group_candidates, _constant_candidates,
    _slice_candidates, _scale_candidates, _view_candidates)


def candidates(seq: Graph, dist: DistributedProgram, finding: Finding) -> Iterator[Repair]:
    """Candidate repairs for `finding`, the likeliest first (those that do not apply to the
    captured graphs are skipped)."""
    seen = set()
    for gen in GENERATORS:
        try:
            for c in gen(seq, dist, finding):
                if c.program is not None and c.what not in seen:
                    seen.add(c.what)
                    yield c
        except (KeyError, IndexError, AttributeError, TypeError):  # a form the generator does not know: none
            continue


# ---------------------------------------------------------------- proof

def _verified(seq: Graph, program: DistributedProgram, bindings: dict, expect: dict | None, examples: dict | None,
              gradients: frozenset):
    """The engine's report on `program`; None when the engine cannot read it."""
    try:
        return verify_graphs(seq, program, bindings, expect, examples=examples, gradients=gradients)
    except Exception:  # noqa: BLE001 - an edit the engine cannot read is no repair
        return None


def proved(seq: Graph, program: DistributedProgram, bindings: dict, expect: dict | None, examples: dict | None,
           gradients: frozenset = frozenset(), report=None) -> bool:
    """The repaired program verified by the rules (a proof), and numerically equal on random
    inputs."""
    report = report or _verified(seq, program, bindings, expect, examples, gradients)
    if report is None or report.status != "verified" or report.strength != "proof":
        return False
    try:
        return not differing_outputs(seq, program, bindings, expect, examples, seed=0)[0]
    except NumericError:
        return True  # the proof stands on its own; numerics are a cross-check only
    except Exception:  # noqa: BLE001
        return False


def _settle(seq: Graph, c: Repair, bindings: dict, expect, examples, gradients: frozenset,
            deadline: float) -> Optional[Repair]:
    """`c` when its program is proved; where the same hunk (the same edit at the same source
    line) is needed at further nodes -- the engine's next finding asks for it, e.g. every
    gradient reduced through one helper -- `c` applied there too, up to MAX_PLACES."""
    program, nodes = c.program, [c.node]
    while time.perf_counter() < deadline:
        report = _verified(seq, program, bindings, expect, examples, gradients)
        if report is None:
            return None
        if report.status == "verified":
            if not proved(seq, program, bindings, expect, examples, gradients, report):
                return None
            what = c.what if len(nodes) == 1 else f"{c.what}, at {len(nodes)} nodes ({', '.join(nodes)})"
            return Repair(c.kind, what, c.node, program, nodes)
        if report.status != "violation" or not report.findings or len(nodes) >= MAX_PLACES:
            return None
        again = next((d for d in candidates(seq, program, report.findings[0]) if d.what == c.what and d.node not in
                      nodes), None)
        if again is None:
            return None
        program, nodes = again.program, nodes + [again.node]
    return None


def budget_for(seconds: float | None) -> float:
    """The search's time box for a program whose verification took `seconds`: a few
    re-verifications' worth, at least MIN_BUDGET and at most BUDGET_SECONDS."""
    if seconds is None:
        return BUDGET_SECONDS
    return min(BUDGET_SECONDS, max(MIN_BUDGET, RE_VERIFICATIONS * seconds))


def suggest(seq: Graph, dist: DistributedProgram, bindings: dict, expect: dict | None, examples: dict | None,
            finding: Finding, gradients: frozenset = frozenset(), limit: int = MAX_CANDIDATES,
            budget: float = BUDGET_SECONDS) -> Optional[Repair]:
    """The first candidate repair of `finding` whose repaired program is proved; None when
    none is (within `limit` candidates and `budget` seconds)."""
    deadline = time.perf_counter() + budget
    for i, c in enumerate(candidates(seq, dist, finding)):
        if i >= limit or time.perf_counter() > deadline:
            return None
        fixed = _settle(seq, c, bindings, expect, examples, gradients, deadline)
        if fixed is not None:
            return fixed
    return None
