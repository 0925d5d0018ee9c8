"""The editing kit of mutation testing: a mutant, the registry its operators are declared
in, and helpers that edit a deep copy of a distributed program's graphs (see
:mod:`.mutants` for the operators of the original suite and :mod:`.mutant_classes` for
those of issue 14's defect classes)."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from ..ir.graph import DistributedProgram, Graph, Node

COLLECTIVE = "_c10d_functional."
WAIT = COLLECTIVE + "wait_tensor"


@dataclass
class Mutant:
    """A mutated program; a mutant of the inputs' layouts (a loader reading another block)
    or of the example data (targets with ignore_index) carries its own `bindings` or
    `examples`, used instead of the case's when it is judged."""
    operator: str
    what: str
    node: str
    ranks: tuple
    program: DistributedProgram
    bindings: Optional[dict] = None
    examples: Optional[dict] = None


@dataclass
class Outcome:
    """killed (a violation), equivalent (verified, and numerically equal), survived
    (verified but numerically different: unsound), unknown (not decided)."""
    mutant: Mutant
    verdict: str
    outcome: str
    seconds: float
    finding: Optional[str] = None


OPERATORS: dict[str, Callable[..., Iterator[Mutant]]] = {}
WITH_CONTEXT: set[str] = set()
"""Operators called as ``fn(dist, bindings, examples)`` (they mutate layouts or data)."""


def operator(name: str, context: bool = False):
    def register(fn):
        OPERATORS[name] = fn
        if context:
            WITH_CONTEXT.add(name)
        return fn
    return register


def mutants(dist: DistributedProgram, operators=None, bindings: dict | None = None,
            examples: dict | None = None) -> Iterator[Mutant]:
    """Every mutant of `dist` by the named operators (default: all); `bindings` and
    `examples` (the case's input relations and integer example data) feed the operators
    that mutate those."""
    for name in operators or OPERATORS:
        if name in WITH_CONTEXT:
            yield from OPERATORS[name](dist, bindings or {}, examples or {})
        else:
            yield from OPERATORS[name](dist)


# ---------------------------------------------------------------- editing helpers

def _edit(dist: DistributedProgram, ranks, fn: Callable[[Graph, int], object]) -> Optional[DistributedProgram]:
    """A deep copy of `dist` with `fn(graph, rank)` applied on `ranks`; None when `fn`
    returns False (the mutation does not apply there)."""
    mutant = copy.deepcopy(dist)
    for r in ranks:
        try:
            if fn(mutant.graphs[r], r) is False:
                return None
        except KeyError:  # ranks' graphs may differ (rank-dependent code): no such node there, no mutant
            return None
    return mutant


def _replace_uses(graph: Graph, old: Node, new: Node, after: int) -> None:
    """Nodes after position `after` (and the outputs) read `new` where they read `old`."""
    def swap(v):
        if v is old:
            return new
        if isinstance(v, (list, tuple)):
            return type(v)(swap(x) for x in v)
        return v
    for n in graph.nodes[after + 1:]:
        if n is not new:
            n.args = swap(n.args)
            n.kwargs = {k: swap(v) for k, v in n.kwargs.items()}
    graph.outputs = {k: new if v is old else v for k, v in graph.outputs.items()}


def _insert_after(graph: Graph, node: Node, new: list[Node]) -> None:
    """Insert `new` after `node`; later readers of `node` read the last new node."""
    at = graph.nodes.index(node)
    graph.nodes[at + 1:at + 1] = new
    _replace_uses(graph, node, new[-1], at + len(new))


def _set_arg(node: Node, i: int, value) -> None:
    node.args = node.args[:i] + (value,) + node.args[i + 1:]


def _waited(graph: Graph, kinds: tuple[str, ...]):
    """(wait node, collective node) pairs whose collective is one of `kinds`."""
    for n in graph.nodes:
        if n.op == WAIT and isinstance(n.args[0], Node) and n.args[0].op in kinds:
            yield n, n.args[0]


SHAPE_PRESERVING = (COLLECTIVE + "all_reduce", COLLECTIVE + "broadcast")
REDUCING = (COLLECTIVE + "all_reduce", COLLECTIVE + "reduce_scatter_tensor")
ALL_RANKS = "all"
