"""The Python API: capture a :class:`~shardproof.case.Case`, or load graph dumps, and verify.

This is the one place that ties the layers together (capture or import -> relations ->
engine); the CLI is a thin shell over it.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import numpy as np

from .case import Case
from .engine import executor
from .engine.budget import stage as budget_stage
from .engine.result import Confirmation, Report
from .engine.verify import ENGINE_STAGES, differing_outputs, numeric_inputs, verify_graphs
from .frontends.fx_program import dump_graphs, dump_kinds, load_program
from .frontends.fx_text import read_dump
from .frontends.hlo_text import is_hlo_text, load_hlo_program, mark_shared_constants
from .frontends.stablehlo_text import is_stablehlo_text, load_stablehlo_program
from .frontends.user_frame import user_location
from .ir.graph import DistributedProgram, Graph
from .relations.infer import RelationsFile, load_yaml, parse_spec, resolve_inputs, resolve_outputs
from .relations.pairing import pair_graph_outputs
from .relations.spec import DERIVED, Ignore, RelationError, Replicate, parse_relation

Progress = Optional[Callable[[str, int, int], None]]
"""``progress(stage, done, total)``: `done` of `total` steps are finished, `stage` is under way."""


def _quiet(stage: str, done: int, total: int) -> None:
    pass


def _offset(progress: Progress, done: int, total: int) -> Progress:
    """The engine's progress (its own steps) as steps `done`.. of `total` of the whole run."""
    if progress is None:
        return None
    return lambda stage, d, t: progress(stage, done + d, total)


class InputError(Exception):
    """Bad input (exit code 3): an unloadable case, an untraceable program, bad relations."""


def _numpy(values: dict) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().double().numpy() if v.is_floating_point() else v.detach().cpu().numpy()
            for k, v in values.items()}


REDRAW_SEED = 20_241_114
"""The seed of the distinct values shardproof gives a live case's single-device weights
before the distributed programs are built from them (deterministic runs)."""


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
    """Trace the reference training step and every rank's ``train_step``."""
    from .frontends import torch_capture as tc
    from .frontends import torch_train as tt
    from .frontends import rank_pool
    from .frontends.rank_pool import capture_ranks
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
        if SYMMETRY and serial:  # one trace per class
            from .frontends.rank_classes import capture_by_class
            graphs, rank_values, classes = capture_by_class(
                case.distributed, world, data_of, case.train, events,
                lambda r: say(f"capturing rank {r} of {world} (training step, one per class)", 1 + r, total))
            rank_values = [_numpy(v) for v in rank_values]
        else:
            graphs, rank_values = capture_ranks(capture_rank, world, workers, lambda r: say(
                f"capturing rank {r} of {world} (training step)", 1 + r, total))
    except tc.CaptureError as exc:
        raise InputError(str(exc) + user_location(exc)) from None
    return seq, DistributedProgram(graphs, classes), _numpy(seq_inputs), rank_values

GRADIENT_OUTPUTS = ("grad:", "updated:")


def training_renames(names, bindings: dict) -> dict:
    """Distributed step outputs named after the single-device parameter they belong to:
    ``grad:<dist param>`` -> ``grad:<single param>`` (others are absent)."""
    renamed = {}
    for name in names:
        prefix = next((p for p in GRADIENT_OUTPUTS if name.startswith(p)), None)
        b = bindings.get(name[len(prefix):]) if prefix else None
        if b is not None:
            renamed[name] = prefix + b.seq_name
    return renamed


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


@dataclass
class Prepared:
    """A captured case or loaded dumps, with input relations and the outputs to check
    (keyed alike on both sides): everything the engine needs."""
    seq: Graph
    dist: DistributedProgram
    bindings: dict
    expect: dict
    examples: dict
    name: str = ""
    gradients: frozenset = frozenset()  # training: outputs that are gradients or updated parameters
    case: Optional[Case] = None  # a live case, run for real to confirm a proof (dumps: None)
    pairing: list = field(default_factory=list)  # dumps with --auto-relations: how outputs were paired
    stated: frozenset = frozenset()  # outputs expected as the returned DTensor's placements state
    capture: Optional[dict] = None  # a live case's capture: seconds, executor, units (engine/executor.py)
    partial_ok: tuple = ()  # dumps: outputs allowed to be partial sums (engine/partial_outputs.py)


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
                              spec, seq_values, rank_values, original_values=original or None, probe=probe)
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


def _optimizer_state(case: Case, values: dict) -> dict:
    """A training step's optimizer state as captured, for the numeric checks: drawn at random,
    AdamW's second moment could be negative or near 0, where ``m / (sqrt(v) + eps)`` turns
    rounding into differences no real step has."""
    if case.train is None:
        return {}
    from .frontends.torch_train import STATE_SEP
    return {n: v for n, v in values.items() if STATE_SEP in n}


def prepare_dumps(seq_path, dist_path, relations_file: str | None = None, auto_relations: bool = False,
                  expect: dict | None = None, kind: str | None = None, progress: Progress = None,
                  world_size: int | None = None, symbols: dict | None = None, graph: str | None = None) -> Prepared:
    """Load graph dumps (never executed) and relate them: `seq_path` is the single-device
    program (a dump file, or a directory holding one rank), `dist_path` the distributed one
    (a directory of per-rank ``<kind>.g<N>.r<rank>.py`` files, or a list of files).

    Input relations come from the YAML `relations_file` (``inputs:``), then, with
    `auto_relations`, from names and shapes. Outputs are compared as
    :func:`~shardproof.relations.infer.resolve_outputs` says: the file's ``expect:`` section
    and `expect` ({distributed output: relation | "R of SEQ_NAME"}, which overrides it) pick
    the outputs and relations; by default every single-device output must be recoverable.
    `kind` (fw, bw, both) picks the graph in directories holding several, `graph` (``g1``)
    one of several ``<kind>.g<N>.r<rank>.py`` graphs. With `auto_relations` and no
    expectations, outputs pair by position and name (:mod:`~shardproof.relations.pairing`),
    a scalar (the loss) expected Replicate() (each rank reports it), the others recoverable;
    the report says which were paired and which left out. `symbols` ({name: int}) sizes
    symbolic dims (``u0``) on both sides, over the file's ``symbols:`` section.

    XLA HLO text (a file starting with ``HloModule``, or a directory holding one ``*.hlo``
    file) is read as one SPMD module instantiated per rank: `world_size` ranks, else as
    many as its collectives' replica groups name."""
    say = progress or _quiet
    total = 2 + len(ENGINE_STAGES)
    file = load_yaml(relations_file) if relations_file else RelationsFile()
    wanted = {**file.expect, **parse_spec(expect, source="expectations")}
    kind = kind or _dump_kind([p for p in (seq_path, dist_path) if isinstance(p, (str, os.PathLike))
                               and os.path.isdir(p) and not hlo_file(p)])
    seq_hlo, dist_hlo = (hlo_file(p) for p in (seq_path, dist_path))
    if world_size and not dist_hlo:
        raise InputError("--world-size applies to case files and HLO modules; for FX dumps it is the number of "
                         "rank files in --dist")
    say("reading the single-device dump", 0, total)
    if seq_hlo:
        seq_graphs = _load_hlo(seq_hlo, 1, file)
    else:
        seq_graphs = load_program(seq_path, kind=kind, constants=file.constants["seq"],
                                  graph=_graph(seq_path, kind, graph), symbols={**file.symbols["seq"], **(symbols or {})})
    if len(seq_graphs) != 1:
        raise InputError(f"{seq_path}: the single-device program must be one graph, but {len(seq_graphs)} rank "
                         f"files were found")
    seq = seq_graphs[0]
    say("reading the distributed dumps", 1, total)
    if dist_hlo:
        graphs = _load_hlo(dist_hlo, world_size, file)
    else:
        graphs = load_program(dist_path, kind=kind, constants=file.constants["dist"],
                              graph=_graph(dist_path, kind, graph), symbols={**file.symbols["dist"], **(symbols or {})})
    if file.shared:
        found = mark_shared_constants([seq] + graphs, file.shared)
        missing = sorted(file.shared - found)
        if missing:
            raise InputError(f"{relations_file}: constants {', '.join(missing)} are stated 'same', but no program "
                             f"has an unprinted constant of that name")
    bindings = resolve_inputs({n.name: n.shape for n in seq.inputs},
                              [{n.name: n.shape for n in g.inputs} for g in graphs], file.inputs,
                              by_shape=auto_relations,
                              labels=[str(g.inputs[0].origin) if g.inputs else g.label for g in graphs])
    pairing = []
    if auto_relations and not wanted:
        pairs, pairing = pair_graph_outputs(seq, graphs)
    else:
        pairs = resolve_outputs([n.name for n in seq.outputs.values()],
                                [[n.name for n in g.outputs.values()] for g in graphs], wanted)
    seq = replace(seq, outputs={s: _output(seq, s) for s in pairs})
    dist = DistributedProgram([replace(g, outputs={s: _output(g, d) for s, (d, _) in pairs.items()})
                               for g in graphs])
    name = f"{os.fspath(seq_path)} vs {os.fspath(dist_path)}" if isinstance(dist_path, (str, os.PathLike)) else ""
    return Prepared(seq, dist, bindings, {s: rel for s, (_, rel) in pairs.items() if rel is not None}, {}, name,
                    pairing=pairing, partial_ok=tuple(file.partial_outputs))


def _graph(path, kind: str, graph: str | None) -> str | None:
    """`graph` for a dump directory that holds it or several graphs (one that holds a
    single graph, like a single-device dump beside a multi-graph one, gives that)."""
    if graph is None or not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        return graph
    names = dump_graphs(path, kind)
    return graph if graph in names or len(names) != 1 else None


XLA_SUFFIXES = (".hlo", ".hlo.txt", ".mlir")


def hlo_file(path) -> str | None:
    """The XLA module `path` names: a file of HLO text (``HloModule ...``) or StableHLO
    (MLIR) text, or a directory holding exactly one ``*.hlo`` / ``*.hlo.txt`` / ``*.mlir``
    file; else None."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    path = os.fspath(path)
    if os.path.isdir(path):
        found = sorted(f for f in os.listdir(path) if f.endswith(XLA_SUFFIXES))
        if len(found) > 1:
            raise InputError(f"{path} holds several XLA modules ({', '.join(found)}): name the file")
        return os.path.join(path, found[0]) if found else None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 20)
    except OSError:
        return None
    return path if is_hlo_text(head) or is_stablehlo_text(head) else None


def _load_hlo(path: str, world_size: int | None, file: RelationsFile) -> list[Graph]:
    """An HLO or StableHLO module, once per rank (StableHLO: `world_size`, else the
    module's ``mhlo.num_partitions``)."""
    if any(file.constants[side] for side in ("seq", "dist")):
        raise InputError(f"{path}: an HLO module prints its constants' values (or elides them: state those "
                         f"'same'); numeric constant values are for FX dumps")
    text = read_dump(path)
    if is_stablehlo_text(text):
        found = re.search(r"mhlo\.num_partitions\s*=\s*(\d+)", text)
        return load_stablehlo_program(text, world_size or (int(found.group(1)) if found else 1), path)
    return load_hlo_program(text, world_size, filename=path)


def _dump_kind(directories: list) -> str:
    """The graph kind the dump directories have in common, when there is exactly one."""
    if not directories:
        return "fw"
    found = [dump_kinds(d) for d in directories]
    common = sorted(set(found[0]).intersection(*found[1:]))
    if len(common) == 1:
        return common[0]
    listing = "; ".join(f"{d}: {', '.join(k) or 'no <kind>.r<N>.py files'}" for d, k in zip(directories, found))
    if common:
        raise InputError(f"the dumps hold several graph kinds ({', '.join(common)}): pick one with --kind "
                         f"({listing})")
    raise InputError(f"the dumps hold no graph kind in common ({listing})")


def _output(graph: Graph, name: str):
    return next(n for n in graph.outputs.values() if n.name == name)


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


CONFIRM_DRAWS = 2
"""Fresh random value sets a proof is confirmed on by execution, besides the case's own."""
NO_CONFIRM = -1
"""``confirm_draws=NO_CONFIRM``: do not run the programs (the best verdict is then unknown)."""
TEMPORAL = True
"""Whether live cases get the temporal checks (engine/temporal.py: async use before wait,
buffers reused in flight, collective order, deadlock); the CLI's ``--no-temporal`` turns it off."""
SYMMETRY = True
"""Whether a training case's ranks are traced one per class (frontends/rank_classes.py); the
CLI's ``--no-symmetry`` turns it off for one run (every rank traced)."""
FIX_SEARCH = True
"""Whether a violation's report searches for a proved fix when the caller does not say
(``fixes=None``); the CLI's ``--no-fix`` and ``fixes=False`` turn it off for one run."""


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
    return _graph_runs(p, torch_exec, len(seeds), how)


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
