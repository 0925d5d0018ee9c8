"""Assumptions rules make about the *values* of inputs, checked against a case's example
inputs (torch-free). A rule or lemma that relies on such an assumption is sound only where
it holds: when the examples break it, the proof that used it is no proof, and the verdict
is left to the numeric evidence (a difference: a violation) or is unknown, naming the op,
the input and the offending value.

- Integer data inputs that reach an index-reading op (``INDEX_READERS``) are valid,
  non-negative indices (``algebra/lemmas.py``: ``ids != c``
  is all-true for a negative c, the one-hot of a target row sums to one; the nll rule
  takes every target): an ``ignore_index`` of -100 among the targets breaks it.
- ``nll_loss`` takes every target: none equals its ``ignore_index`` (any value).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from ..ir.graph import Graph, Node, descendants

VALID_INDICES = "class targets and token ids are valid indices (no ignore_index entries)"

PASS_THROUGH = {"aten.view", "aten.reshape", "aten._unsafe_view", "aten.flatten", "aten.clone", "aten.contiguous",
                "aten.squeeze", "aten.unsqueeze", "aten.alias", "aten.expand", "aten.t", "aten.permute",
                "aten.slice", "aten.select", "aten._to_copy", "aten.lift_fresh_copy", "aten.detach"}
"""Ops whose output holds (some of) their first operand's values unchanged."""

NLL = {"aten.nll_loss_forward": (1, 4), "aten.nll_loss_backward": (2, 5),
       "aten.nll_loss2d_forward": (1, 4), "aten.nll_loss2d_backward": (2, 5)}
"""nll ops: (position of the target, position of ignore_index)."""


@dataclass(frozen=True)
class Breach:
    """An example input value that breaks an assumption a rule relies on."""
    assumption: str
    op: str
    node: str
    input: str
    value: int

    def __str__(self) -> str:
        return (f"the rules assume {self.assumption}, but input {self.input!r} holds {self.value} "
                f"(read by {self.op} at node {self.node})")


def _is_integer(node: Node) -> bool:
    return str(getattr(node.type, "dtype", "")).startswith(("i", "u"))


def _source_input(node) -> Optional[Node]:
    """The graph input whose values `node` holds unchanged (through views and copies)."""
    while isinstance(node, Node) and node.op in PASS_THROUGH and node.args:
        node = node.args[0]
    return node if isinstance(node, Node) and node.op == "input" else None


INDEX_READERS = {"aten.embedding", "aten.embedding_dense_backward", "aten.index", "aten.index_select",
                 "aten.gather", "aten.scatter", "aten.scatter_add", "aten.scatter_reduce", "aten.index_put",
                 "aten.index_add", "aten.take", "aten.one_hot", "aten.ne", "aten.eq", *NLL}
"""Ops whose rules (or the lemmas over them) take integer values as valid indices."""


def _index_reader(node: Node, users: dict) -> Optional[Node]:
    """The first op downstream of `node` (along any path) that takes its values as indices."""
    return next((u for u in descendants(node, users) if u.op in INDEX_READERS), None)


def _arg(node: Node, pos: int, name: str, default):
    if len(node.args) > pos:
        return node.args[pos]
    return node.kwargs.get(name, default)


def input_breaches(graph: Graph, examples: Mapping[str, np.ndarray] | None) -> list[Breach]:
    """Every assumption on input values that `examples` (single-device inputs by name)
    break in `graph`, one per input and assumption, in graph order."""
    if not examples:
        return []
    out: list[Breach] = []
    users = graph.users()
    for n in graph.inputs:
        values = examples.get(n.name)
        if values is None or not _is_integer(n) or not users.get(n):
            continue
        values = np.asarray(values)
        negative = values[values < 0] if values.size else values
        reader = _index_reader(n, users) if negative.size else None
        if reader is not None:
            out.append(Breach(VALID_INDICES, reader.op, reader.name, n.name, int(negative.flat[0])))
    flagged = {b.input for b in out}
    for n in graph.nodes:
        if n.op not in NLL:
            continue
        target_pos, ignore_pos = NLL[n.op]
        source = _source_input(_arg(n, target_pos, "target", None))
        ignore_index = _arg(n, ignore_pos, "ignore_index", -100)
        if source is None or source.name in flagged or source.name not in examples \
                or not isinstance(ignore_index, (int, np.integer)):
            continue
        if bool((np.asarray(examples[source.name]) == ignore_index).any()):
            out.append(Breach(f"no target of {n.op} equals its ignore_index", n.op, n.name, source.name,
                              int(ignore_index)))
            flagged.add(source.name)
    return out
