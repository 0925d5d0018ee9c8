"""The Python API: capture a :class:`~shardproof.case.Case`, or load graph dumps, and verify.

This is the one place that ties the layers together (capture or import -> relations ->
engine); the CLI is a thin shell over it.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace

import numpy as np

from .api_base import (GRADIENT_OUTPUTS, InputError, Prepared, Progress, REDRAW_SEED, _numpy,  # noqa: F401
                       _offset, _quiet, training_renames)
from .api_confirm import (CONFIRM_DRAWS, EXEC_BYTES, EXEC_BYTES_PER_DRAW, NO_CONFIRM, _execute,  # noqa: F401
                          _execute_graphs, _graph_runs, confirm)
from .api_dumps import XLA_SUFFIXES, _dump_kind, _graph, _load_hlo, _output, hlo_file, prepare_dumps  # noqa: F401
from .case import Case
from .engine import executor
from .engine.result import Report
from .engine.verify import ENGINE_STAGES, differing_outputs, verify_graphs
from .frontends.user_frame import user_location
from .heap import frozen_heap
from .ir.graph import DistributedProgram, Graph
from .relations.infer import load_yaml, parse_spec, resolve_inputs
from .relations.spec import RelationError, parse_relation


def capture_case(case: Case, world_size: int | None = None, progress: Progress = None, workers: int | None = None):
    """Trace the single-device program and every rank (on `workers` processes: see
    :func:`~shardproof.frontends.rank_pool.capture_ranks`); returns graphs and input values:
    the single-device ones the ranks were built from (the weights redrawn with distinct
    values, so a loader's blocks tell themselves apart), the ranks', and the user's own
    single-device values (for programs built before the redraw)."""
    try:
        from .frontends import torch_capture as tc
        from .frontends import torch_draws as draws
    except ImportError as exc:
        raise InputError(f"capturing a live PyTorch case needs torch ({exc}); install shardproof[torch]") from None
    world = world_size or case.world_size
    say = progress or _quiet
    total = world + 1 + len(ENGINE_STAGES)
    saved = draws.snapshot(case.single)
    draws.redraw(case.single, REDRAW_SEED)
    try:
        if case.train is not None:
            seq, dist, seq_values, rank_values = _capture_training(case, world, say, total, workers)
        else:
            seq, dist, seq_values, rank_values = _capture_forward(case, world, say, total, tc, workers)
    finally:
        draws.restore(case.single, saved)
    original = _numpy(tc.program_inputs(case.single, {})) if saved else {}
    original = {k: v for k, v in original.items() if k in seq_values}
    return seq, dist, seq_values, rank_values, original, _data_probe(case, world, draws)


def _data_probe(case: Case, world: int, draws):
    """The case's ``dist_inputs`` applied to data holding distinct values (single-device
    probe, each rank's), which shows the pieces it selects where the example data repeat
    values (masks, small vocabularies); None where it cannot be applied to such data."""
    if case.dist_inputs is None:
        return None
    probe = draws.distinct_inputs(case.inputs, REDRAW_SEED)
    try:
        ranks = [_numpy({k: v for k, v in case.dist_inputs(r, world, probe).items() if hasattr(v, "detach")})
                 for r in range(world)]
    except Exception:  # noqa: BLE001  (a dist_inputs that needs its real data: no probe)
        return None
    return _numpy({k: v for k, v in probe.items() if hasattr(v, "detach")}), ranks


def _capture_forward(case: Case, world: int, say, total: int, tc, workers=None):
    from .frontends.rank_pool import capture_ranks
    try:
        say("capturing the single-device program", 0, total)
        t0, events = time.perf_counter(), TEMPORAL  # read here: a remote worker has its own module globals
        seq = tc.capture_single(case.single, case.inputs)
        seq_values = _numpy(tc.program_inputs(case.single, case.inputs))
        executor.record("capture", "single-device", time.perf_counter() - t0)

        def capture_rank(rank):
            data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else case.inputs
            graph, program = tc.capture_rank(case.distributed, rank, world, data, events=events)
            return graph, _numpy(tc.program_inputs(program, data))
        graphs, rank_values = capture_ranks(capture_rank, world, workers,
                                             lambda r: say(f"capturing rank {r} of {world}", 1 + r, total))
    except tc.CaptureError as exc:
        raise InputError(str(exc) + user_location(exc)) from None
    return seq, DistributedProgram(graphs), seq_values, rank_values


def lower_jax_case(case: Case, world_size: int | None, spec: dict, progress: Progress = None):
    """Lower a JAX case (single-device and shard_map programs) and import both; relations
    its ``in_specs`` imply fill `spec` where the user stated none."""
    from .frontends.jax_lower import JaxError, lower_case
    if progress:
        progress("lowering the JAX programs", 0, 1)
    try:
        seq, graphs, values, implied = lower_case(case, world_size or case.world_size)
    except JaxError as exc:
        raise InputError(str(exc)) from None
    for name, rel in parse_spec(implied, source=f"in_specs of case {case.name or '?'}").items():
        spec.setdefault(name, rel)
    return seq, DistributedProgram(graphs), values


def _capture_training(case: Case, world: int, say, total: int, workers=None):
    """Trace the reference training step and every rank's ``train_step`` (pipeline stages
    without static shapes: inferred across the stages first, frontends/torch_stage_shapes.py)."""
    from .frontends.torch_capture import CaptureError
    from .frontends.torch_stage_shapes import with_stage_shapes
    try:
        return with_stage_shapes(lambda: _capture_training_once(case, world, say, total, workers), case.distributed,
                                 world, lambda r: case.dist_inputs(r, world, case.inputs) if case.dist_inputs
                                 else case.inputs, case.train)
    except CaptureError as exc:  # the inference's own (the capture's are InputErrors already)
        raise InputError(str(exc) + user_location(exc)) from None


def _capture_training_once(case: Case, world: int, say, total: int, workers=None):
    from .frontends import torch_capture as tc
    from .frontends import torch_train as tt
    from .frontends import rank_pool
    from .frontends.rank_pool import capture_ranks
    from .frontends.torch_stage_shapes import ShapesNeeded
    try:
        say("capturing the single-device training step", 0, total)
        t0, events = time.perf_counter(), TEMPORAL  # read here: a remote worker has its own module globals
        seq, seq_inputs = tt.capture_single_step(case.single, case.inputs, case.train)
        executor.record("capture", "single-device", time.perf_counter() - t0)

        def data_of(rank):
            return case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else case.inputs

        def capture_rank(rank):
            graph, inputs = tt.capture_rank_step(case.distributed, rank, world, data_of(rank), case.train,
                                                 events=events)
            return graph, _numpy(inputs)
        classes = []
        run = executor.active()
        serial = (run is None or run.kind == "serial") and (rank_pool.CAPTURE_WORKERS if workers is None else workers) == 1
        if SYMMETRY:  # one trace per class (on the executor's workers unless serial)
            from .frontends.class_capture import capture_by_class

            def announce(r):
                say(f"capturing rank {r} of {world} (training step, one per class)", 1 + r, total)
            graphs, rank_values, classes = capture_by_class(
                case.distributed, world, data_of, case.train, events, announce,
                None if serial else lambda one, cls: rank_pool.capture_classes(one, cls, workers, announce))
            rank_values = [_numpy(v) for v in rank_values]
        else:
            graphs, rank_values = capture_ranks(capture_rank, world, workers, lambda r: say(
                f"capturing rank {r} of {world} (training step)", 1 + r, total))
    except ShapesNeeded:
        raise
    except tc.CaptureError as exc:
        raise InputError(str(exc) + user_location(exc)) from None
    return seq, DistributedProgram(graphs, classes), _numpy(seq_inputs), rank_values


def training_expectations(seq: Graph, dist: DistributedProgram, bindings: dict) -> tuple[DistributedProgram, dict]:
    """A parameter's gradient and updated value are expected to relate to the single-device
    ones as the parameter does. Distributed outputs are renamed after the single-device
    parameter they belong to (``grad:<dist param>`` -> ``grad:<single param>``). One the
    step returns as a DTensor is expected as its placements state instead (DTensor gives a
    norm weight's gradient as Partial("sum")), whatever its parameter's placement."""
    expect, renamed = {}, training_renames(dist.graphs[0].outputs, bindings)
    stated = dist.graphs[0].stated
    for name, seq_name in renamed.items():
        b = bindings[name.split(":", 1)[1]]
        if seq_name not in seq.outputs:
            raise RelationError(f"the distributed step returns {name}, but the single-device parameter it relates to "
                                f"({b.seq_name}) has no {name.split(':', 1)[0]} output")
        expect[seq_name] = _as_stated(stated.get(name), b, dist.graphs[0].stated_inputs.get(b.name))
    graphs = [replace(g, outputs={renamed.get(k, k): v for k, v in g.outputs.items()},
                      stated={renamed.get(k, k): v for k, v in g.stated.items()}) for g in dist.graphs]
    return DistributedProgram(graphs, dist.classes), expect


def _as_stated(returned, binding, param_stated):
    """A returned DTensor's relation where its parameter's DTensor is the single-device
    parameter itself (the binding is what the parameter's placements state), else the
    binding: placements relate a DTensor to its own full value, and a parameter held
    permuted (fused QKV interleaved) has another full value than the single-device one."""
    if returned is None or param_stated is None or param_stated != binding.relation:
        return binding.relation
    return returned


def stated_expectations(dist: DistributedProgram) -> dict:
    """Outputs every rank returns as a DTensor with the same placements: the relation
    those placements state (see ``frontends/torch_placements.py``)."""
    first = dist.graphs[0].stated
    return {n: rel for n, rel in first.items() if all(g.stated.get(n) == rel for g in dist.graphs[1:])}


@frozen_heap()
def prepare(case: Case, world_size: int | None = None, relations: dict | None = None,
            relations_file: str | None = None, progress: Progress = None, workers: int | None = None) -> Prepared:
    """Capture `case` at `world_size` (default: the case's) and relate its inputs.

    `relations` (name/glob -> relation) and a YAML `relations_file` add to and override
    the case's own relations; inputs no one names are related by value matching. `workers`:
    processes the ranks are captured on (:func:`~shardproof.frontends.rank_pool.capture_ranks`)."""
    spec = parse_spec(case.relations, source=f"relations of case {case.name or '?'}")
    spec.update(parse_spec(relations, source="relations"))
    expect = {name: parse_relation(rel) for name, rel in (case.expect or {}).items()}
    if relations_file:
        file = load_yaml(relations_file)
        if any(file.constants.values()) or file.shared or any(e.seq_name for e in file.expect.values()):
            raise RelationError(f"{relations_file}: constants: and expectations with of: are for graph dumps; a "
                                f"live case's constants have values and its outputs have the same names")
        spec.update(file.inputs)
        expect.update({name: e.relation for name, e in file.expect.items()})
    if case.backend == "jax":
        seq, dist, seq_values = lower_jax_case(case, world_size, spec, progress)
        rank_values = original = probe = timings = None
    else:
        t0, mark = time.perf_counter(), len(executor.LOG)
        seq, dist, seq_values, rank_values, original, probe = capture_case(case, world_size, progress, workers)
        ran_on, units = executor.collect(mark)
        timings = {"seconds": time.perf_counter() - t0, "executor": ran_on, "units": units}
    bindings = resolve_inputs({n.name: n.shape for n in seq.inputs},
                              [{n.name: n.shape for n in g.inputs} for g in dist.graphs],
                              spec, seq_values, rank_values, original_values=original or None, probe=probe,
                              made_from=_made_from(case))
    if case.train is not None:
        dist, expected = training_expectations(seq, dist, bindings)
        expect = {**expected, **_expand_globs(expect, list(seq.outputs))}
    stated = {n: r for n, r in stated_expectations(dist).items() if n in seq.outputs}
    expect = {**stated, **expect}
    for name in expect:
        if name not in seq.outputs:
            raise RelationError(f"the expectation names output {name!r}, but the single-device program's outputs "
                                f"are: {', '.join(seq.outputs)}")
    gradients = frozenset(n for n in seq.outputs if n.startswith(GRADIENT_OUTPUTS)) if case.train else frozenset()
    return Prepared(seq, dist, bindings, expect, _integer_inputs(seq_values) | _optimizer_state(case, seq_values),
                    case.name, gradients, case, stated=frozenset(n for n, r in stated.items() if expect[n] == r),
                    capture=timings)


def _made_from(case: Case):
    """A training step's optimizer states are made from their parameters (torch_train.state_source)."""
    if case.train is None or case.backend == "jax":
        return None
    from .frontends.torch_train import state_source
    return state_source(case.train.optimizer)


def _optimizer_state(case: Case, values: dict) -> dict:
    """A training step's optimizer state as captured, for the numeric checks: drawn at random,
    AdamW's second moment could be negative or near 0, where ``m / (sqrt(v) + eps)`` turns
    rounding into differences no real step has."""
    if case.train is None:
        return {}
    from .frontends.torch_train import STATE_SEP
    return {n: v for n, v in values.items() if STATE_SEP in n}


def verify_case(case: Case, world_size: int | None = None, relations: dict | None = None,
                relations_file: str | None = None, progress: Progress = None, views: bool = False,
                confirm_draws: int | None = None, fixes: bool | None = None) -> Report:
    """Capture and verify `case` (see :func:`prepare` for the options; `views`,
    `confirm_draws` and `fixes`: see :func:`verify_prepared`)."""
    t0 = time.perf_counter()
    p = prepare(case, world_size, relations, relations_file, progress)
    steps = p.dist.world_size + 1
    return _timed(verify_prepared(p, views, _offset(progress, steps, steps + len(ENGINE_STAGES)), confirm_draws,
                                  fixes), t0)


def verify_dumps(seq_path, dist_path, relations_file: str | None = None, auto_relations: bool = False,
                 expect: dict | None = None, kind: str | None = None, progress: Progress = None,
                 views: bool = False, world_size: int | None = None, confirm_draws: int | None = None,
                 symbols: dict | None = None, graph: str | None = None, fixes: bool | None = None,
                 allow_partial_outputs=None) -> Report:
    """Load and verify graph dumps (see :func:`prepare_dumps` for the options; `views`,
    `confirm_draws` and `fixes`: see :func:`verify_prepared`). `allow_partial_outputs`:
    output names or globs (``["*"]``: all) that may be partial sums completed outside the
    graph (:mod:`~shardproof.engine.partial_outputs`), besides the file's ``partial_outputs:``."""
    t0 = time.perf_counter()
    p = prepare_dumps(seq_path, dist_path, relations_file, auto_relations, expect, kind, progress, world_size,
                      symbols, graph)
    p.partial_ok += tuple(allow_partial_outputs or ())
    return _timed(verify_prepared(p, views, _offset(progress, 2, 2 + len(ENGINE_STAGES)), confirm_draws, fixes), t0)


def _timed(report: Report, t0: float) -> Report:
    """The whole run's wall time (capture or loading, proof, confirmation) in
    ``stats["wall_seconds"]``; ``stats["seconds"]`` stays the proof's alone."""
    report.stats["wall_seconds"] = round(time.perf_counter() - t0, 4)
    return report


TEMPORAL = True
"""Whether live cases get the temporal checks (engine/temporal.py: async use before wait,
buffers reused in flight, collective order, deadlock); the CLI's ``--no-temporal`` turns it off."""
SYMMETRY = True
"""Whether a training case's ranks are traced one per class (frontends/rank_classes.py); the
CLI's ``--no-symmetry`` turns it off for one run (every rank traced)."""
FIX_SEARCH = True
"""Whether a violation's report searches for a proved fix when the caller does not say
(``fixes=None``); the CLI's ``--no-fix`` and ``fixes=False`` turn it off for one run."""


@frozen_heap()
def verify_prepared(p: Prepared, views: bool = False, progress: Progress = None,
                    confirm_draws: int | None = None, fixes: bool | None = None) -> Report:
    """Verify; with `views` the report carries every node's relation status (``report.graphs``:
    the single-device graph, then each rank's), which the HTML report draws. A training
    step's report tabulates each parameter's gradient and updated value.

    A proof is confirmed by running the programs for real (:func:`confirm`) on the case's
    own values and `confirm_draws` fresh draws (default :data:`CONFIRM_DRAWS`;
    :data:`NO_CONFIRM`: not run): the verdict is verified only when execution confirms it.
    With `fixes` (default :data:`FIX_SEARCH`), a violation's first finding carries a proved
    repair where one is found (:func:`suggest_fix`)."""
    report = verify_graphs(p.seq, p.dist, p.bindings, p.expect, examples=p.examples, name=p.name, views=views,
                           progress=progress, gradients=p.gradients)
    report.pairing = [x.to_json() for x in p.pairing]
    report.rank_classes = p.dist.classes
    if report.findings and p.dist.classes:
        from .engine.positions import name_odd_microbatches
        name_odd_microbatches(report.findings, p.dist.classes)
    if p.gradients:
        report.parameters = parameter_table(p, report)
    if report.status == "violation" and report.findings and (FIX_SEARCH if fixes is None else fixes):
        suggest_fix(p, report.findings[0], report.stats.get("seconds"))
    if TEMPORAL and p.dist.graphs and all(getattr(g, "events", None) is not None for g in p.dist.graphs):
        from .engine.temporal import apply_to_report  # before confirming: a program that hangs is not run
        apply_to_report(report, [g.events for g in p.dist.graphs])
    if p.case is None:  # dumps: a partial output is verified only where the user allows it
        from .engine.partial_outputs import gate
        gate(report, p.expect, p.partial_ok)
    if report.status == "verified":
        confirm(p, report, CONFIRM_DRAWS if confirm_draws is None else confirm_draws)
    report.stats["timings"] = executor.stage_times(p.capture, report.stats.get("seconds", 0.0),
                                                   report.confirmation.seconds if report.confirmation else 0.0)
    return report


def suggest_fix(p: Prepared, finding, seconds: float | None = None):
    """A proved repair of `finding` (:mod:`shardproof.engine.repair`), set as its ``fix``
    (the one-line hunk) and returned (its class, the repaired program); None, and the
    finding left as it is, when no candidate repair is proved. `seconds` (the verification's
    own time) sizes the search's time box."""
    from .engine.repair import budget_for, suggest
    repair = suggest(p.seq, p.dist, p.bindings, p.expect, p.examples, finding, p.gradients,
                     budget=budget_for(seconds))
    if repair is not None:
        finding.fix = repair.what
    return repair


def save_counterexample(report: Report, case_path, directory, world_size: int | None = None) -> str:
    """Save inputs on which the case file's programs really differ when run (a violation's
    counterexample: the data inputs and the single-device weights, as ``.npz``) and a
    ``replay.py`` that runs the single-device program and the distributed one (gloo, one
    process per rank, CPU) on them and prints the difference; returns the script's path.
    Raises :class:`InputError` when the case is not a PyTorch case or no value set tried
    makes the programs differ (:mod:`shardproof.frontends.torch_replay`)."""
    from .testing import load_case
    case = load_case(case_path, world_size or report.world_size)
    if case.backend != "torch":
        raise InputError(f"--save-counterexample replays PyTorch cases; {case_path} is a {case.backend} case")
    from .frontends.torch_replay import NoDifference, save
    try:
        return save(case, os.fspath(case_path), report.world_size, report, os.fspath(directory), REDRAW_SEED)
    except NoDifference as exc:
        raise InputError(f"{case_path}: {exc}") from None


def parameter_table(p: Prepared, report: Report) -> list[dict]:
    """Each parameter's relation, and the relation its gradient and updated value hold."""
    holds = {o.name: o.holds for o in report.outputs}
    rows = []
    for name, b in p.bindings.items():
        if f"grad:{b.seq_name}" not in p.seq.outputs:
            continue
        row = {"parameter": b.seq_name if b.seq_name == name else f"{name} (of {b.seq_name})",
               "relation": str(b.relation), "gradient": holds.get(f"grad:{b.seq_name}")}
        if f"updated:{b.seq_name}" in p.seq.outputs:
            row["updated"] = holds.get(f"updated:{b.seq_name}")
        stated = [k for k in ("grad", "updated") if f"{k}:{b.seq_name}" in p.stated
                  and str(p.expect[f"{k}:{b.seq_name}"]) != str(b.relation)]
        if stated:  # judged by the returned DTensor's placements, not the parameter's relation
            row["stated"] = stated
        rows.append(row)
    return rows


def cross_check(p: Prepared, seeds=(0, 1, 2)) -> list[str]:
    """Outputs that differ numerically between the programs on random inputs (a test
    oracle for the proof rules: a verified case must never differ)."""
    bad = set()
    for seed in seeds:
        bad.update(differing_outputs(p.seq, p.dist, p.bindings, p.expect, p.examples, seed=seed)[0])
    return sorted(bad)


def mutation_test(case: Case, world_size: int | None = None, operators=None, progress: Progress = None):
    """Capture `case` (a correct program) and judge every mutant of its distributed graphs
    (:mod:`shardproof.engine.mutants`): killed, equivalent, unknown -- or survived, a
    soundness bug. Returns the outcomes."""
    from .engine.mutants import judge, mutants
    say = progress or _quiet
    p = prepare(case, world_size)
    todo = [m for m in mutants(p.dist, operators, p.bindings, p.examples) if m.program is not None]  # None: does not apply here

    def judged(i: int):  # without its mutant, which need not travel back from a worker
        return replace(judge(p.seq, todo[i], p.bindings, p.expect, p.examples, gradients=p.gradients), mutant=None)
    run, mark = executor.active() or executor.Executor(), len(executor.LOG)  # independent proofs: the run's executor
    outcomes = run.map(judged, range(len(todo)), "mutants", [m.what for m in todo],
                       lambda i: say(f"{case.name}: {todo[i].what}", i, len(todo)))
    executor.collect(mark)
    return [replace(o, mutant=m) for o, m in zip(outcomes, todo)]


def run_zoo_case(case: Case, name: str, progress: Progress = None):
    """Verify one zoo case at its world size and judge the verdict against its ``meta``
    (:mod:`shardproof.zoo`); pending cases are not run."""
    import time

    from .zoo import ZooResult, expectation, judge
    result = ZooResult(name, case.meta.get("source", ""), case.world_size, expectation(case.meta, case.world_size))
    if result.expected.verdict == "pending":
        return result
    t0 = time.perf_counter()
    try:
        judge(result, verify_case(case, progress=progress))
    except InputError as exc:
        result.verdict, result.error = "error", str(exc)
    result.seconds = time.perf_counter() - t0
    return result


def _expand_globs(expect: dict, outputs: list[str]) -> dict:
    """Expectations keyed by output name or glob (``grad:*``) -> by output name."""
    import fnmatch
    out = {}
    for pattern, rel in expect.items():
        names = [pattern] if pattern in outputs else fnmatch.filter(outputs, pattern) or [pattern]
        out.update({name: rel for name in names})
    return out


def _integer_inputs(values: dict) -> dict:
    """Integer data (token ids, labels) keep their example values; floats are drawn small."""
    return {k: v for k, v in values.items() if not np.issubdtype(v.dtype, np.floating)}
