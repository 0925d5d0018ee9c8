"""Inputs that the capture itself made from another input by the same elementwise code on
every side (issue 16: the step's tail sub-linear in the layers): a training step's optimizer
states, ``<state>:<param>``, each made from its parameter's value (frontends/torch_train
``state_values``). Matching each of them by value searched every single-device input of its
rank; here it takes its parameter's relation instead, **after proving it**:

1. the state is what the making code gives for its parameter, on the single device
   (``S == f(P)``) and on every rank (``S_r == f(P_r)``), checked element by element on the
   values the programs received, where ``f`` is elementwise;
2. the parameter's relation is already established (given, or matched by value without
   ambiguity), and it is a selection of elements on every rank (a layout: never ``Partial``,
   whose pieces sum to the whole, which an elementwise ``f`` does not preserve, nor
   ``Ignore``);
3. then ``S_r = f(P_r) = f(P[V_r]) = f(P)[V_r] = S[V_r]`` for every rank, and the layout is
   checked once more on the state's own values (``by_value._holds``).

Anything short of that leaves the input to value matching as before (``infer_by_value``)."""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from .by_value import _holds
from .spec import RelationError

MadeFrom = Callable[[str], "tuple[str, Callable[[str], str], Callable] | None"]
"""``made_from(name)``: ``(source input, single-device name of the made input given the
source's single-device name, remake(source values) -> values)``, or None for other inputs."""

HOW = "value (made as its parameter is)"


def by_source(names, made_from: MadeFrom, bound: Mapping, seq_values: Mapping, rank_values: list) -> dict:
    """``{name: (single-device name, relation)}`` for the inputs of `names` proved to hold
    their source's relation (see the module docstring); the others are left out."""
    out = {}
    for name in names:
        made = made_from(name)
        src = bound.get(made[0]) if made else None
        if src is None or src.seq_name not in seq_values:
            continue
        seq_name, remake = made[1](src.seq_name), made[2]
        if seq_name not in seq_values or any(name not in r or made[0] not in r for r in rank_values):
            continue
        whole = np.asarray(seq_values[seq_name])
        locals_ = [np.asarray(r[name]) for r in rank_values]
        if not _same(remake(seq_values[src.seq_name]), whole) or \
                not all(_same(remake(r[made[0]]), loc) for r, loc in zip(rank_values, locals_)):
            continue
        if _is_selection(src.relation, whole.shape, len(locals_)) and _holds(src.relation, whole, locals_):
            out[name] = (seq_name, src.relation)
    return out


def _is_selection(rel, shape, world: int) -> bool:
    """Every rank holds a selection of elements (a layout): not Partial, Ignore or any
    relation without one (``_holds`` would read a missing layout as the whole tensor)."""
    try:
        return all(rel.layout(shape, r, world) is not None for r in range(world))
    except RelationError:
        return False


def _same(a, b) -> bool:
    a = np.asarray(a)
    return a.shape == b.shape and np.array_equal(a, b)
