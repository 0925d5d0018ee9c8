"""Pairing the outputs of two graph dumps without an ``expect:`` list (``--auto-relations``).

A training forward captured by AOTAutograd (inputs named ``primals_N``) returns its
user-visible outputs first, then the tensors it saves for the backward pass: inputs,
repeats of outputs, activations. Those saved tensors differ between a single-device
program and its parallel version (each saves what its own backward needs), so their
positions and names mean nothing across the two. The user-visible outputs are the
leading ones, up to the first output that is a graph input or repeats an earlier
output; a graph of another kind (an inference graph) returns only user-visible outputs.

Each user-visible single-device output is paired with the distributed output at the same
position holding the same name on every rank, else with the one of the same name, else
(when both programs show as many user-visible outputs) with the one at its position.
Scalar outputs (the loss) are compared first. Every output not compared is listed with
the reason it was left out.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

from ..ir.graph import Graph
from .spec import Relation, RelationError, Replicate

SAVED = "saved for the backward pass (a training forward returns it after its user-visible outputs)"


class Pairing(NamedTuple):
    """One single-device output: the distributed output it is compared with (None: left
    out), how they were paired, or why it was left out."""
    seq_name: str
    dist_name: Optional[str]
    how: str

    def to_json(self) -> dict:
        key = "paired" if self.dist_name is not None else "left_out"
        return {"single_device": self.seq_name, "distributed": self.dist_name, key: self.how}

    def __str__(self):
        if self.dist_name is None:
            return f"{self.seq_name}: left out ({self.how})"
        of = "" if self.dist_name == self.seq_name else f" with {self.dist_name}"
        return f"{self.seq_name}{of} ({self.how})"


def is_training_forward(input_names: Sequence[str]) -> bool:
    return bool(input_names) and all(n.startswith("primals_") for n in input_names)


def user_visible(outputs: Sequence[str], input_names: Sequence[str]) -> int:
    """How many leading `outputs` the user sees (see the module doc)."""
    if not is_training_forward(input_names):
        return len(outputs)
    inputs, seen = set(input_names), set()
    for i, name in enumerate(outputs):
        if name in inputs or name in seen:
            return i
        seen.add(name)
    return len(outputs)


def pair_outputs(seq_outputs: Sequence[str], seq_inputs: Sequence[str], rank_outputs: list[Sequence[str]],
                 dist_inputs: Sequence[str], scalars: frozenset = frozenset()) -> list[Pairing]:
    """Every distinct single-device output with its pairing (paired ones first, scalars --
    `scalars` names them -- before the rest); raises :class:`RelationError` saying what to
    state when no output pairs."""
    n_seq = user_visible(seq_outputs, seq_inputs)
    n_dist = min(user_visible(r, dist_inputs) for r in rank_outputs)
    visible_dist = [n for n in dict.fromkeys(rank_outputs[0][:n_dist]) if all(n in r[:n_dist] for r in rank_outputs)]
    same_count = n_seq == n_dist
    claimed, paired, left = set(), [], []
    for i, name in enumerate(seq_outputs):
        if name in {p.seq_name for p in paired + left}:
            continue
        if i >= n_seq:
            left.append(Pairing(name, None, SAVED))
            continue
        if i < n_dist and all(r[i] == name for r in rank_outputs) and name not in claimed:
            found = (name, "by position and name")
        elif name in visible_dist and name not in claimed:
            found = (name, "by name")
        elif same_count and all(r[i] == rank_outputs[0][i] for r in rank_outputs) \
                and rank_outputs[0][i] not in claimed and rank_outputs[0][i] not in seq_outputs[:n_seq]:
            found = (rank_outputs[0][i], "by position")
        else:
            left.append(Pairing(name, None, "no distributed output has its name, nor its position among as many "
                                            "user-visible outputs; state it in expect: to compare it"))
            continue
        claimed.add(found[0])
        paired.append(Pairing(name, *found))
    if not paired:
        shown = ", ".join(visible_dist) or "none"
        raise RelationError(f"single-device output(s) {', '.join(dict.fromkeys(seq_outputs[:n_seq])) or 'none'} have "
                            f"no distributed counterpart by name or position (the distributed program's user-visible "
                            f"outputs are: {shown}); say which outputs to compare in the relations' expect: section "
                            f"(DIST_NAME: {{of: SEQ_NAME, relation: R}}) or with --expect 'DIST_NAME=R of SEQ_NAME'")
    paired.sort(key=lambda p: p.seq_name not in scalars)
    return paired + left


def pair_graph_outputs(seq: Graph, graphs: list[Graph]) -> tuple[dict[str, tuple[str, Optional[Relation]]], list]:
    """:func:`pair_outputs` of the graphs: ``{single-device output: (distributed output,
    relation expected)}`` -- a scalar (the loss) Replicate(), since every rank reports it;
    the others any relation that recovers them -- and the pairings."""
    scalars = frozenset(n.name for n in seq.outputs.values() if getattr(n.type, "shape", None) == ())
    pairing = pair_outputs([n.name for n in seq.outputs.values()], [n.name for n in seq.inputs],
                           [[n.name for n in g.outputs.values()] for g in graphs], [n.name for n in graphs[0].inputs],
                           scalars)
    return {p.seq_name: (p.dist_name, Replicate() if p.seq_name in scalars else None)
            for p in pairing if p.dist_name is not None}, pairing
