"""A proof confirmed by running the programs for real: :func:`confirm` (see :mod:`.api`)."""
from __future__ import annotations

import time

from .api_base import Prepared, training_renames
from .engine.budget import stage as budget_stage
from .engine.result import Confirmation, Report
from .engine.verify import numeric_inputs
from .relations.spec import DERIVED, Ignore, Replicate

CONFIRM_DRAWS = 2
"""Fresh random value sets a proof is confirmed on by execution, besides the case's own."""
NO_CONFIRM = -1
"""``confirm_draws=NO_CONFIRM``: do not run the programs (the best verdict is then unknown)."""


def confirm(p: Prepared, report: Report, draws: int = CONFIRM_DRAWS) -> Report:
    """Run the proved programs for real and compare their values under the proved output
    relations (:mod:`shardproof.engine.confirm`); the report's verdict stays verified only
    when execution confirms it, a contradiction is an internal inconsistency (unknown)."""
    from .engine.confirm import Unconfirmable, judge, settle, too_large
    t0 = time.perf_counter()
    by = "gloo" if p.case is not None and p.case.backend != "jax" else ("jax" if p.case is not None else "torch")
    if draws < 0:
        return settle(report, Confirmation(by, 0, "skipped", "not run (--no-confirm)"))
    budget_stage("confirming the proof by execution")  # a --timeout / --max-memory budget: checked before
    try:
        big = too_large([p.seq] + p.dist.graphs) if p.case is not None else None  # dumps: their memory estimate
        if big:
            raise Unconfirmable(f"too large to execute here: {big}")
        runs = _execute(p, [None] + list(range(1, draws + 1)))
        conf = judge(p.seq, p.dist, p.bindings, report.outputs, runs, by, time.perf_counter() - t0)
        conf.seconds = round(time.perf_counter() - t0, 3)  # the runs too (dumps: executed as judged)
        if conf.outcome == "confirmed" and getattr(runs, "chunked", False):
            conf.detail = CHUNKED
    except Unconfirmable as exc:
        conf = Confirmation(by, 0, "skipped", str(exc), round(time.perf_counter() - t0, 3))
    return settle(report, conf)


def _execute(p: Prepared, seeds: list) -> list:
    """Both programs run on each value set (seed None: the case's own values)."""
    from .engine.confirm import Execution, Unconfirmable
    if p.case is None:
        return _execute_graphs(p, seeds)
    if p.case.backend == "jax":
        from .frontends.jax_run import JaxRunError, run_jax_case
        try:
            return [Execution(*r) for r in run_jax_case(p.case, p.dist.world_size, seeds, list(p.seq.outputs))]
        except JaxRunError as exc:
            raise Unconfirmable(str(exc)) from None
    from .frontends.torch_run import RunError, related_data, run_case
    stated = {name: b.relation for name, b in p.bindings.items()  # data every rank receives whole, related
              if name in p.case.inputs and b.seq_name == name and not isinstance(b.relation, (Replicate, Ignore))
              and not isinstance(b.relation, DERIVED)} if p.case.dist_inputs is None else {}
    try:
        runs = [Execution(*r) for r in run_case(p.case, p.dist.world_size, seeds,
                                                rank_data=related_data(stated) if stated else None)]
    except RunError as exc:
        raise Unconfirmable(str(exc)) from None
    if p.case.train is not None:  # rank outputs named after the single-device parameters, as the graphs are
        for run in runs:
            run.rank_outputs = [{training_renames([k], p.bindings).get(k, k): v for k, v in out.items()}
                                for out in run.rank_outputs]
    return runs


EXEC_BYTES = 4 << 30  # dumps: the most memory executing the graphs here may take
EXEC_BYTES_PER_DRAW = 1 << 30  # dumps needing more than this run one value set, not several


def _execute_graphs(p: Prepared, seeds: list) -> list:
    """Dumps: the graphs run with torch's kernels and the collectives computed across ranks
    (:mod:`shardproof.frontends.torch_exec`), on inputs drawn through the proved relations."""
    from .engine.confirm import Unconfirmable
    try:
        from .frontends import torch_exec
    except ImportError as exc:
        raise Unconfirmable(f"graph dumps are not executed by this installation ({exc})") from None
    from .frontends.torch_stream import fitting  # ranks one at a time, f32 held as declared, where needed
    from .engine.budget import memory_limit  # --max-memory, where given, is the bound instead
    need, name, size, how = fitting(p.seq, p.dist, memory_limit() or EXEC_BYTES)
    if how is None:
        raise Unconfirmable(f"too large to execute here: about {need / 2**30:.1f} GiB (the largest tensor, "
                            f"{name}, is {size / 2**20:.0f} MiB)")
    if need > EXEC_BYTES_PER_DRAW:  # a large graph: one value set (the report says how many ran)
        seeds = seeds[:1]
    return _Runs(_graph_runs(p, torch_exec, len(seeds), how), bool(how.get("chunks")))


CHUNKED = ("executed with torch's kernels, the largest values a chunk at a time (the same ops on the same "
           "values, never held whole: frontends/torch_chunks.py)")


class _Runs:
    """The value sets' runs, and whether the largest values were computed a chunk at a time."""

    def __init__(self, runs, chunked: bool):
        self.runs, self.chunked = runs, chunked

    def __iter__(self):
        return iter(self.runs)


def _graph_runs(p: Prepared, torch_exec, n: int, how: dict | None = None):
    """The value sets, executed one at a time as the judge asks for them (a large graph's
    values are dropped before the next set runs)."""
    from .engine.confirm import Execution, Unconfirmable
    draw = getattr(torch_exec, "draw_program_inputs", None)
    from .engine.rng import plan_randomness  # random ops draw corresponding randomness (or cannot run)
    randomness = plan_randomness(p.seq, p.dist, p.bindings)
    if randomness is not None and randomness.blocked:
        raise Unconfirmable(randomness.blocked)
    for i in range(n):
        s_in, d_in = (draw(p.seq, p.dist, p.bindings, i) if draw is not None
                      else numeric_inputs(p.seq, p.dist, p.bindings, p.examples, i))
        try:
            s_out, d_out = torch_exec.execute(p.seq, p.dist, s_in, d_in, randomness=randomness, seed=i,
                                              **(how or {}))
        except Exception as exc:  # noqa: BLE001  (a graph torch cannot run: not confirmed, said so)
            raise Unconfirmable(f"executing the graphs with torch failed: {type(exc).__name__}: {exc}") from None
        yield Execution(f"draw {i + 1}", s_in, s_out, d_in, d_out)
