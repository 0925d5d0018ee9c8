"""How far the executed programs are apart (torch-free): for a replayed counterexample,
each output's largest elementwise difference between what the ranks hold and what they
should hold of the single-device value, under the output's expected relation.

An output whose expectation is "recoverable" (any layout will do) is compared under the
candidate relation that fits best (replicated, sharded along a dim, or a partial sum), so
a difference is never an artefact of a guessed layout.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..relations.spec import DERIVED, Partial, Relation, RelationError, Replicate, Shard, held, parse_relation
from .confirm import FLOOR, tolerance

REDUCE = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}


def relation_of(expected: str) -> Optional[Relation]:
    """The relation an output's expectation names; None for "recoverable (...)" or a form
    that does not parse."""
    try:
        return parse_relation(expected)
    except (RelationError, ValueError, SyntaxError, TypeError):
        return None


def gap(rel: Relation, whole, pieces: list, world: int) -> float:
    """The largest elementwise difference between the ranks' values and what `rel` says
    they hold of `whole` (inf where the shapes do not fit, nan where `rel` is no layout)."""
    whole = np.asarray(whole, dtype=np.float64)
    pieces = [np.asarray(p, dtype=np.float64) for p in pieces]
    if isinstance(rel, Partial):
        if len({p.shape for p in pieces}) != 1 or pieces[0].shape != whole.shape:
            return math.inf
        return _worst(REDUCE[rel.op](np.stack(pieces), 0), whole)
    try:
        vecs = [rel.layout(whole.shape, r, world) for r in range(world)]
    except (RelationError, ValueError, IndexError, ZeroDivisionError):
        return math.inf
    except NotImplementedError:  # a relation that is no layout
        return math.nan
    if any(v is None for v in vecs):
        return math.nan
    wants = [held(whole, v) for v in vecs]
    if any(w.shape != p.shape for w, p in zip(wants, pieces)):
        return math.inf
    return max((_worst(p, w) for p, w in zip(pieces, wants)), default=0.0)


def _worst(got: np.ndarray, want: np.ndarray) -> float:
    if not got.size:
        return 0.0
    d = np.abs(got - want)
    both_nan = np.isnan(got) & np.isnan(want)
    return float(np.max(np.where(both_nan, 0.0, np.nan_to_num(d, nan=math.inf))))


def candidates(expected: str, shape: tuple) -> list[Relation]:
    rel = relation_of(expected)
    if rel is not None:
        return [rel]
    return [Replicate()] + [Shard(d) for d in range(len(shape))] + [Partial("sum")]


def output_gaps(expected: dict, seq_outputs: dict, rank_outputs: list, bases: dict | None = None
                ) -> dict[str, tuple[float, float]]:
    """Per output (name -> expected relation, in words): (its largest difference under the
    best-fitting candidate relation, the tolerance it is judged with). Outputs a rank did
    not return are inf. The tolerance is relative to the output's magnitude, or, for an
    output in `bases` (an updated parameter -> the parameter before the step), to its
    change from that base (the step, whose rounding is what differs)."""
    world = len(rank_outputs)
    scale = max((float(np.nanmax(np.abs(np.asarray(v, dtype=np.float64)))) for v in seq_outputs.values()
                 if np.size(v) and np.isfinite(np.asarray(v, dtype=np.float64)).any()), default=0.0)
    out = {}
    for name, exp in expected.items():
        if name not in seq_outputs:
            continue
        whole = np.asarray(seq_outputs[name])
        if any(name not in r for r in rank_outputs):
            out[name] = (math.inf, 0.0)
            continue
        pieces = [r[name] for r in rank_outputs]
        found = [g for g in (gap(rel, whole, pieces, world) for rel in candidates(exp, whole.shape)) if not math.isnan(g)]
        moved = whole - np.asarray(bases[name]) if name in (bases or {}) and np.shape(bases[name]) == whole.shape \
            else whole
        magnitude = float(np.nanmax(np.abs(moved))) if whole.size and np.isfinite(moved).any() else 0.0
        out[name] = (min(found, default=math.nan), tolerance(None) * max(magnitude, FLOOR * scale))
    return out


def differs(gaps: dict) -> list[str]:
    """The outputs whose difference is beyond rounding."""
    return [name for name, (g, tol) in gaps.items() if not math.isnan(g) and g > tol]


def unrelated_inputs(relations: dict, seq_inputs: dict, rank_inputs: list) -> Optional[str]:
    """The first rank input whose value is not what its relation (``report.relations``:
    name -> {relation, of}) says it holds of the single-device input, in words; None when
    all hold (inputs whose relation is no layout are not checked)."""
    world = len(rank_inputs)
    for name, r in relations.items():
        rel = relation_of(r["relation"])
        whole = seq_inputs.get(r["of"])
        if rel is None or isinstance(rel, (Partial, *DERIVED)) or whole is None or any(name not in x for x in rank_inputs):
            continue
        g = gap(rel, whole, [x[name] for x in rank_inputs], world)
        scale = float(np.nanmax(np.abs(np.asarray(whole, dtype=np.float64)))) if np.size(whole) else 0.0
        if not math.isnan(g) and g > tolerance(None) * scale:
            return f"{name} is not {r['relation']} of {r['of']} (largest difference {g:.3g})"
    return None
