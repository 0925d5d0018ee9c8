"""Graph IR: per-rank dataflow graphs of ATen-level ops.

Every frontend (live capture, FX dump import, builder API) produces this IR, and every
later layer reads only this IR. Nodes are in topological order; arguments refer to
earlier nodes directly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator


@dataclass(frozen=True)
class Source:
    """Where a node came from in the user's program (innermost frame outside torch)."""

    file: str
    line: int
    fn: str = ""
    code: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f" in {self.fn}" if self.fn else "")


@dataclass(frozen=True)
class TensorType:
    """A tensor's shape and dtype; where the frontend knows them (live capture), its
    `strides` and storage `offset` in elements (not part of equality: two types of the
    same shape and dtype are the same type)."""

    shape: tuple[int, ...]
    dtype: str = "f32"
    strides: tuple[int, ...] | None = field(default=None, compare=False)
    offset: int | None = field(default=None, compare=False)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


def contiguous_strides(size) -> list[int]:
    """Row-major strides (in elements) of a tensor of `size`."""
    strides, step = [], 1
    for s in reversed(list(size)):
        strides.append(step)
        step *= max(int(s), 1)
    return strides[::-1]


@dataclass(eq=False)
class Node:
    """One op application. `op` is a registry key such as ``aten.mm`` or
    ``_c10d_functional.all_reduce``; `type` is a TensorType, a tuple of them for
    multi-output ops, or None for non-tensor values. `source` is where the op came from in
    the user's program; `origin` is where the node was read from (a dump file and line),
    None for live capture."""

    name: str
    op: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    type: Any = None
    source: Source | None = None
    origin: Source | None = None
    defects: tuple = ()
    """(kind, message, hint) triples found at capture that make this node wrong whatever the
    values (e.g. a collective writing into a buffer the backend does not support)."""

    @property
    def inputs(self) -> Iterator["Node"]:
        """Nodes this node reads, in argument order (nested lists included)."""
        yield from _nodes_in(self.args)
        yield from _nodes_in(tuple(self.kwargs.values()))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    def __repr__(self) -> str:
        return f"%{self.name}"


def _nodes_in(values) -> Iterator[Node]:
    for v in values:
        if isinstance(v, Node):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _nodes_in(v)


@dataclass(eq=False)
class Graph:
    """A program: placeholder nodes (op ``input``), then op nodes, then named outputs."""

    nodes: list[Node] = field(default_factory=list)
    outputs: dict[str, Node] = field(default_factory=dict)
    label: str = ""
    # output name -> the relation the program itself states for it (a returned DTensor's
    # placements); input name -> the one a DTensor parameter's placements state
    stated: dict = field(default_factory=dict)
    stated_inputs: dict = field(default_factory=dict)
    # a live rank's program order beside the dataflow (ir/events.py RankEvents: its collectives'
    # and P2P ops' issues and waits, for the temporal checks), and node name -> (pipeline
    # stage, microbatch) where a pipeline schedule marked them
    events: Any = None
    positions: dict = field(default_factory=dict)

    @property
    def inputs(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "input"]

    def has(self, name: str) -> bool:
        return any(n.name == name for n in self.nodes)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def users(self) -> dict[Node, list[Node]]:
        out: dict[Node, list[Node]] = {n: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                out[i].append(n)
        return out


def descendants(node: Node, users: dict) -> Iterator[Node]:
    """The nodes downstream of `node` along any path (breadth first, each once), given the
    graph's ``users()``."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop(0)
        for u in users.get(n, []):
            if u not in seen:
                seen.add(u)
                yield u
                todo.append(u)


@dataclass(eq=False)
class DistributedProgram:
    """One graph per rank of a world; rank r runs ``graphs[r]``."""

    graphs: list[Graph]
    classes: list = field(default_factory=list)
    """Where the ranks were captured one per class: ``{representative, ranks, derived,
    microbatch_classes}`` (frontends/rank_classes.py)."""

    @property
    def world_size(self) -> int:
        return len(self.graphs)
