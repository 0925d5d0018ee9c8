"""Mutation testing: plausible distributed bugs injected into a program's graphs, to show
that the proof rules catch them and never verify a wrong program.

Each mutation operator is declared once (``@operator``) and yields mutants of a
:class:`DistributedProgram`: a collective dropped, duplicated, reduced with another op or
over the wrong group; two collectives issued in the other order on one rank; a slice
offset shifted, a scalar constant changed, a tensor scaled or two inputs swapped on one
rank; two ranks running each other's program. :func:`judge` verifies a mutant and, when
it is verified, evaluates both programs on random inputs: a verified mutant must be
*equivalent*, else the rules are unsound (a *survivor*).

The operators for issue 14's defect classes (casts, rooted collectives' roots, buffer
layouts, fill extents, loaders' blocks, ignore_index targets, split sizes) live in
:mod:`.mutant_classes`; the editing kit both use in :mod:`.mutation_edits`.
"""
from __future__ import annotations

import copy
import time
from typing import Optional

from ..ir.graph import DistributedProgram, Graph, Node
from . import mutant_classes  # noqa: F401 - registers the operators of issue 14's defect classes
from .mutation_edits import (ALL_RANKS, COLLECTIVE, OPERATORS, REDUCING, SHAPE_PRESERVING, WAIT, Mutant,  # noqa: F401
                             Outcome, _edit, _insert_after, _replace_uses, _set_arg, _waited, mutants, operator)
from .numeric import NumericError
from .verify import differing_outputs, verify_graphs

# ---------------------------------------------------------------- operators

@operator("drop-collective")
def _drop(dist):
    for wait, coll in _waited(dist.graphs[0], SHAPE_PRESERVING):
        def drop(g, r, name=wait.name):
            w = g.node(name)
            w.op, w.args, w.kwargs = "aten.clone", (w.args[0].args[0],), {}
        yield Mutant("drop-collective", f"{coll.op.split('.')[-1]} before {wait.name} dropped", wait.name,
                     ALL_RANKS, _edit(dist, range(dist.world_size), drop))


@operator("duplicate-collective")
def _duplicate(dist):
    for wait, coll in _waited(dist.graphs[0], (COLLECTIVE + "all_reduce",)):
        def twice(g, r, name=wait.name):
            w = g.node(name)
            again = Node(f"{name}_again", w.args[0].op, (w,) + w.args[0].args[1:], dict(w.args[0].kwargs), w.type,
                         w.args[0].source)
            _insert_after(g, w, [again, Node(f"{name}_again_wait", WAIT, (again,), {}, w.type, w.source)])
        yield Mutant("duplicate-collective", f"all_reduce before {wait.name} applied twice", wait.name, ALL_RANKS,
                     _edit(dist, range(dist.world_size), twice))


@operator("reduce-op")
def _reduce_op(dist):
    for _, coll in _waited(dist.graphs[0], REDUCING):
        for op in ("max", "avg"):
            if coll.args[1] == op:
                continue
            yield Mutant("reduce-op", f"{coll.name} reduces with {op}", coll.name, ALL_RANKS,
                         _edit(dist, range(dist.world_size), lambda g, r, name=coll.name, op=op:
                               _set_arg(g.node(name), 1, op)))


@operator("wrong-group")
def _wrong_group(dist):
    world = dist.world_size
    if world < 2:
        return
    half = world // 2 if world % 2 == 0 else 1
    for _, coll in _waited(dist.graphs[0], SHAPE_PRESERVING):
        if tuple(coll.args[-1]) != tuple(range(world)):
            continue
        def split(g, r, name=coll.name):
            start = r // half * half
            _set_arg(g.node(name), len(g.node(name).args) - 1, tuple(range(start, start + half)))
        yield Mutant("wrong-group", f"{coll.name} over groups of {half} instead of all {world} ranks", coll.name,
                     ALL_RANKS, _edit(dist, range(world), split))


@operator("reorder-collectives")
def _reorder(dist):
    """Rank 1 issues two independent collectives in the other order (a rank-dependent
    schedule): its peers pair them wrongly."""
    if dist.world_size < 2:
        return
    colls = [n for n in dist.graphs[1].nodes if n.op.startswith(COLLECTIVE) and n.op != WAIT]
    for a, b in zip(colls, colls[1:]):
        def swap(g, r, a=a.name, b=b.name):
            na, nb = g.node(a), g.node(b)
            ia, ib = g.nodes.index(na), g.nodes.index(nb)
            between = set(g.nodes[ia:ib])
            cone, todo = [], [nb]  # b and what it reads from after a: moved before a, unless it needs a
            while todo:
                n = todo.pop()
                if n is na:
                    return False
                if n not in cone:
                    cone.append(n)
                    todo.extend(x for x in n.inputs if x in between)
            moved = [n for n in g.nodes if n in cone]
            g.nodes = g.nodes[:ia] + moved + [n for n in g.nodes[ia:] if n not in cone]
        yield Mutant("reorder-collectives", f"rank 1 issues {b.name} before {a.name}", b.name, (1,),
                     _edit(dist, [1], swap))


@operator("slice-offset")
def _slice_offset(dist):
    for n in dist.graphs[-1].nodes:
        if n.op == "aten.slice" and len(n.args) >= 4 and isinstance(n.args[2], int) and isinstance(n.args[3], int):
            r = dist.world_size - 1
            yield Mutant("slice-offset", f"slice {n.name} shifted by one on rank {r}", n.name, (r,),
                         _edit(dist, [r], lambda g, r, name=n.name: _shift_slice(g.node(name))))


def _shift_slice(node: Node):
    src, dim, start, stop = node.args[:4]
    size = src.type.shape[dim]
    stop = min(stop, size)
    if stop + 1 <= size:
        _set_arg(node, 2, start + 1)
        _set_arg(node, 3, stop + 1)
    elif start > 0:
        _set_arg(node, 2, start - 1)
        _set_arg(node, 3, stop - 1)
    else:
        return False


def _scalar_position(node: Node) -> Optional[int]:
    return next((i for i, a in enumerate(node.args) if isinstance(a, float) and a not in (0.0, float("-inf"))
                 and abs(a) != float("inf")), None)


@operator("rank-constant")
def _rank_constant(dist):
    r = dist.world_size - 1
    for n in dist.graphs[r].nodes:
        i = _scalar_position(n) if n.op not in ("constant", "input") else None
        if i is not None:
            yield Mutant("rank-constant", f"scalar {n.args[i]!r} of {n.name} times 1.5 on rank {r}", n.name, (r,),
                         _edit(dist, [r], lambda g, r, name=n.name, i=i: _set_arg(g.node(name), i,
                                                                                 g.node(name).args[i] * 1.5)))


@operator("scale-tensor")
def _scale_tensor(dist):
    """A collective's result or an output scaled by 2 (a loss or gradient scaled twice),
    on one rank and on all of them."""
    g0 = dist.graphs[0]
    targets = [w for w, _ in _waited(g0, SHAPE_PRESERVING)] + [n for n in g0.outputs.values() if n.op != "input"]
    seen = set()
    for t in targets:
        if t.name in seen or not hasattr(t.type, "dtype") or not t.type.dtype.startswith(("f", "bf")):
            continue
        seen.add(t.name)
        for ranks in ([0], list(range(dist.world_size))):
            def scale(g, r, name=t.name):
                x = g.node(name)
                _insert_after(g, x, [Node(f"{name}_scaled", "aten.mul", (x, 2.0), {}, x.type, x.source)])
            where = "every rank" if len(ranks) > 1 else "rank 0"
            yield Mutant("scale-tensor", f"{t.name} doubled on {where}", t.name,
                         ALL_RANKS if len(ranks) > 1 else (0,), _edit(dist, ranks, scale))


@operator("swap-inputs")
def _swap_inputs(dist):
    """On rank 0, two inputs of the same type read each other (a weight loaded into the
    wrong parameter)."""
    g0 = dist.graphs[0]
    inputs = [n for n in g0.inputs if n.type is not None and g0.users()[n]]
    for i, a in enumerate(inputs):
        b = next((x for x in inputs[i + 1:] if x.type == a.type), None)
        if b is None:
            continue
        def swap(g, r, a=a.name, b=b.name):
            na, nb = g.node(a), g.node(b)
            tmp = Node(f"{a}_tmp", "aten.clone", (na,), {}, na.type)
            g.nodes.insert(g.nodes.index(nb) + 1, tmp)
            _replace_uses(g, na, nb, g.nodes.index(tmp))
            _replace_uses(g, nb, tmp, g.nodes.index(tmp))
        yield Mutant("swap-inputs", f"{a.name} and {b.name} swapped on rank 0", a.name, (0,), _edit(dist, [0], swap))


@operator("swap-ranks")
def _swap_ranks(dist):
    """Ranks 0 and 1 run each other's program (a wrong rank mapping)."""
    if dist.world_size < 2:
        return
    graphs = list(copy.deepcopy(dist).graphs)
    graphs[0], graphs[1] = graphs[1], graphs[0]
    yield Mutant("swap-ranks", "ranks 0 and 1 run each other's program", "", (0, 1), DistributedProgram(graphs))


# ---------------------------------------------------------------- judging

def judge(seq: Graph, mutant: Mutant, bindings: dict, expect: dict | None = None, examples: dict | None = None,
          seeds=(0, 1, 2), gradients: frozenset = frozenset()) -> Outcome:
    """Verify a mutant; a verified one is checked numerically on random inputs."""
    t0 = time.perf_counter()
    bindings = mutant.bindings if mutant.bindings is not None else bindings
    examples = mutant.examples if mutant.examples is not None else examples
    try:
        report = verify_graphs(seq, mutant.program, bindings, expect, examples=examples, gradients=gradients)
    except Exception as exc:  # noqa: BLE001 - an engine crash on a mutant is undecided, and reported
        return Outcome(mutant, "error", "unknown", time.perf_counter() - t0,
                       f"internal error: {type(exc).__name__}: {exc}")
    finding = None
    if report.findings:
        f = report.findings[0]
        finding = f"{f.kind} at {f.node} ({f.op})"
    if report.status == "violation":
        outcome = "killed"
    elif report.status == "verified":
        try:
            differs = any(differing_outputs(seq, mutant.program, bindings, expect, examples, seed=s)[0] for s in seeds)
        except NumericError:
            differs = None
        outcome = {True: "survived", False: "equivalent", None: "unconfirmed"}[differs]
    else:
        outcome = "unknown"
    return Outcome(mutant, report.status, outcome, time.perf_counter() - t0, finding)
