"""Confirmation of a proof by execution (torch-free): the values the programs computed when
run for real (a gloo group, torch's kernels, jax) are compared under the output relations
the proof established, with a tolerance for the dtype's rounding.

The proof is about real arithmetic; execution is floating point, so the tolerance is the
dtype's (exact for integers and bools). A value set counts only when the proved *input*
relations hold on the values the programs actually received (a case that built its rank
programs from a copy of the weights does not follow a redraw). A proof the execution
contradicts is a shardproof bug: the verdict becomes unknown ("internal inconsistency"),
never verified. This check shares nothing with the rules or the numpy numerics.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..ir.graph import DistributedProgram, Graph
from ..relations.spec import DERIVED, Ignore, Partial, RelationError, held, parse_relation
from .next_step import for_unconfirmed
from .numeric import derive as derive_numeric
from .result import Confirmation, OutputCheck, Report
from .verify import output_differs

REPORT_TO = "please report it (the case or dump files and this output) to the shardproof issue tracker"

TOLERANCE = {"f64": 1e-6, "f32": 1e-3, "f16": 3e-2, "bf16": 5e-2}
"""Relative to the tensor's largest magnitude: summation order differs between the
programs (split reductions, collectives), so rounding noise grows with the tensor's scale."""

MAX_ELEMENTS = 1 << 26  # per tensor: beyond that, not executed here (memory, time)


@dataclass
class Execution:
    """One value set, run for real: both programs' inputs and outputs by name (numpy)."""
    label: str
    seq_inputs: dict
    seq_outputs: dict
    rank_inputs: list
    rank_outputs: list


class Unconfirmable(Exception):
    """The programs cannot be run here (too large, a runtime error): the proof stays unconfirmed."""


def tolerance(dtype: Optional[str]) -> float:
    """Relative tolerance for a dtype (0: exact, for integers and bools)."""
    if dtype is None:
        return TOLERANCE["f32"]
    return TOLERANCE.get(dtype, 0.0 if dtype.startswith(("i", "u", "b")) and dtype != "bf16" else TOLERANCE["f32"])


FLOOR = 1e-3
"""Where an output is (nearly) zero in exact arithmetic (a bias gradient softmax cancels,
the input gradient of a layer norm over two elements), its rounding noise follows the
computation's scale: the tolerance never drops below FLOOR times the largest finite magnitude
of the output and of the floating-point inputs the single-device program computes it from
(not indices, whose magnitude is no scale; not other outputs nor unrelated inputs)."""


def finite_magnitude(values) -> float:
    """The largest magnitude among the finite elements of `values` (0.0 when none is): an
    infinity is no scale -- taken as one, every finite difference would pass, and so would
    +inf against -inf."""
    a = np.abs(np.asarray(values, dtype=np.float64))
    a = a[np.isfinite(a)]
    return float(a.max()) if a.size else 0.0


def closeness(rtol: float, floor: float = 0.0):
    """``close(got, want)``: same shape, NaN where the other is NaN, the same infinity (sign
    included: ``1/-0.0`` is not ``1/+0.0``) where the other is infinite, and every finite
    element within `rtol` times `want`'s largest finite magnitude (at least `floor`)."""
    def close(got, want) -> bool:
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        if got.shape != want.shape:
            return False
        if not np.array_equal(np.isnan(got), np.isnan(want)):
            return False
        inf = np.isinf(got) | np.isinf(want)
        if not np.array_equal(got[inf], want[inf]):
            return False
        rest = ~(np.isnan(want) | inf)
        scale = max(finite_magnitude(want), floor)
        return bool(np.all(np.abs(got[rest] - want[rest]) <= rtol * scale))
    return close


def too_large(graphs) -> Optional[str]:
    """The first tensor too large to execute here, in words; None when all fit."""
    from .numeric import _too_large
    return _too_large(graphs, MAX_ELEMENTS)


def _dtype(graph: Graph, name: str) -> Optional[str]:
    node = graph.outputs.get(name) if name in graph.outputs else (graph.node(name) if graph.has(name) else None)
    ty = getattr(node, "type", None)
    return getattr(ty, "dtype", None)


def unrelated_input(seq: Graph, dist: DistributedProgram, bindings: dict, run: Execution) -> Optional[str]:
    """The first distributed input whose proved relation does not hold on the values the
    rank received (in words), or None when all hold."""
    world = dist.world_size
    partial_totals: dict = {}
    for r, g in enumerate(dist.graphs):
        for n in g.inputs:
            b = bindings.get(n.name)
            if b is None or isinstance(b.relation, Ignore):
                continue
            got = run.rank_inputs[r].get(n.name)
            whole = run.seq_inputs.get(b.seq_name)
            if got is None or whole is None:
                return f"{n.name} (rank {r}) was not found among the inputs the programs ran with"
            close = closeness(tolerance(n.type.dtype if n.type else None))
            if isinstance(b.relation, Partial):
                partial_totals.setdefault(n.name, (b, whole, []))[2].append(got)
                continue
            if isinstance(b.relation, DERIVED):
                ids = getattr(b.relation, "ids", None) or b.seq_name
                formula = b.relation.derivation(seq.node(ids).type, n.type, r, world)
                want = derive_numeric(formula, {"ids": run.seq_inputs[ids]})
            else:
                want = held(whole, b.relation.layout(np.shape(whole), r, world))
            if not close(got, want):
                return f"{n.name} on rank {r} is not {b.relation} of {b.seq_name}"
    for name, (b, whole, parts) in partial_totals.items():
        reduce = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}[b.relation.op]
        if len(parts) == world and not closeness(tolerance(None))(reduce(np.stack(parts), 0), whole):
            return f"{name} is not {b.relation} of {b.seq_name}"
    return None


def _proved(check: OutputCheck):
    """The relation the proof established for an output (None: recoverable in some layout,
    e.g. a gathered one, which the comparison then finds by value)."""
    try:
        return parse_relation(check.holds)
    except (RelationError, ValueError, SyntaxError):
        return None


def differing_output(seq: Graph, dist: DistributedProgram, checks: list[OutputCheck], run: Execution) -> Optional[str]:
    """The first proved output whose executed values break its proved relation, in words."""
    scales = input_scales(seq, run.seq_inputs)
    for check in checks:
        if check.holds is None:
            continue
        name = check.name
        if name not in run.seq_outputs:
            return f"output {name}: the single-device program did not return it when run"
        floor = _floor(seq, name, run, scales)
        missing = [r for r, out in enumerate(run.rank_outputs) if name not in out]
        if missing:
            return f"output {name}: rank {missing[0]} did not return it when run"
        s_env = {seq.outputs[name]: run.seq_outputs[name]}
        d_envs = [{g.outputs[name]: out[name]} for g, out in zip(dist.graphs, run.rank_outputs)]
        rtol = tolerance(_dtype(seq, name))
        rel = _proved(check)
        if output_differs(seq, dist, name, rel, s_env, d_envs, close=closeness(rtol, floor)) and (
                rel is not None or not _values_found(run, name, rtol, floor)):
            return f"output {name} (proved {check.holds}) differs on {run.label}{_gap(run, name)}"
    return None


def _floating_magnitude(x) -> float:
    return finite_magnitude(x) if x is not None and np.issubdtype(np.asarray(x).dtype, np.floating) else 0.0


def input_scales(seq: Graph, seq_inputs: dict) -> dict:
    """Node name -> the largest finite magnitude among the floating-point inputs the node is
    computed from (one pass over the graph, in its topological order); a value set's input
    that is no input node of the graph (named otherwise) counts for every node."""
    named = {n.name for n in seq.inputs}
    unplaced = max((_floating_magnitude(x) for k, x in seq_inputs.items() if k not in named), default=0.0)
    scale: dict = {}
    for n in seq.nodes:
        if n.op == "input":
            scale[n.name] = max(_floating_magnitude(seq_inputs.get(n.name)), unplaced)
        else:
            scale[n.name] = max((scale.get(i.name, unplaced) for i in n.inputs), default=unplaced)
    return scale


def _floor(seq: Graph, name: str, run: Execution, scales: dict) -> float:
    """FLOOR times the scale of the single-device computation of output `name`: its own largest
    finite magnitude and that of the floating-point inputs it is computed from -- never
    another output's or an unrelated input's (a large one would widen every output's
    tolerance: partial sums offset by a large input c before the all-reduce and c subtracted
    after lose every digit of float32, yet passed; the single device never adds c)."""
    node = seq.outputs.get(name)
    used = scales.get(node.name, 0.0) if node is not None else max(scales.values(), default=0.0)
    return FLOOR * max(finite_magnitude(run.seq_outputs[name]), used)


def _values_found(run: Execution, name: str, rtol: float, floor: float) -> bool:
    """For a layout the proof names only by positions (``Gathered``), whose by-value search
    is exact: every value each rank holds is, within the tolerance, a value of the
    single-device output (weaker than the layout, but never fooled by rounding)."""
    whole = np.sort(np.asarray(run.seq_outputs[name], dtype=np.float64).ravel())
    if not whole.size:
        return all(not np.size(o[name]) for o in run.rank_outputs)
    tol = rtol * max(finite_magnitude(whole), floor)
    for out in run.rank_outputs:
        piece = np.asarray(out[name], dtype=np.float64).ravel()
        at = np.clip(np.searchsorted(whole, piece), 1, max(whole.size - 1, 1))
        nearest = np.minimum(np.abs(piece - whole[at - 1]), np.abs(piece - whole[np.minimum(at, whole.size - 1)]))
        if not np.all(nearest <= tol):
            return False
    return True


def _gap(run: Execution, name: str) -> str:
    want = np.asarray(run.seq_outputs[name], dtype=np.float64)
    got = [np.asarray(o[name], dtype=np.float64) for o in run.rank_outputs]
    if all(g.shape == want.shape for g in got):
        worst = max(float(np.nanmax(np.abs(g - want))) if g.size else 0.0 for g in got)
        return f": the largest elementwise difference from the single-device value is {worst:.3g}"
    return ""


def judge(seq: Graph, dist: DistributedProgram, bindings: dict, checks: list[OutputCheck], runs: list[Execution],
          by: str, seconds: float = 0.0) -> Confirmation:
    """Compare every value set whose input relations hold; the first contradiction decides."""
    counted, dropped = 0, []
    for run in runs:
        off = unrelated_input(seq, dist, bindings, run)
        if off is not None:
            dropped.append(f"{run.label}: {off}")
            continue
        diff = differing_output(seq, dist, checks, run)
        if diff is not None:
            return Confirmation(by, counted + 1, "contradicted", diff, round(seconds, 3))
        counted += 1
    if not counted:
        return Confirmation(by, 0, "skipped", "no value set satisfied the proved input relations ("
                            + "; ".join(dropped) + ")", round(seconds, 3))
    note = f"{len(dropped)} draw(s) not counted: " + "; ".join(dropped) if dropped else ""
    return Confirmation(by, counted, "confirmed", note, round(seconds, 3))


def settle(report: Report, confirmation: Confirmation) -> Report:
    """A proof stands as verified only when execution confirmed it; otherwise unknown."""
    report.confirmation = confirmation
    if report.status != "verified" or confirmation.outcome == "confirmed":
        return report
    report.status, report.strength = "unknown", None
    if confirmation.outcome == "contradicted":
        report.reason = (f"internal inconsistency: the proof says the programs agree, but running them contradicts "
                         f"it: {confirmation.detail}. This is a bug in shardproof, not a verdict on your program: "
                         f"{REPORT_TO}")
    else:
        report.reason = (f"proved, but not confirmed by execution: {confirmation.detail}; "
                         f"{for_unconfirmed(confirmation.detail)}")
    return report
