"""The Python API: capture a :class:`~shardproof.case.Case`, or load graph dumps, and verify.

This is the one place that ties the layers together (capture or import -> relations ->
engine); the CLI is a thin shell over it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Callable, Optional

import numpy as np

from .case import Case
from .engine.result import Report
from .engine.verify import differing_outputs, verify_graphs
from .frontends.fx_text import dump_kinds, load_program
from .ir.graph import DistributedProgram, Graph
from .relations.infer import RelationsFile, load_yaml, parse_spec, resolve_inputs, resolve_outputs
from .relations.spec import RelationError, parse_relation

Progress = Optional[Callable[[str], None]]


class InputError(Exception):
    """Bad input (exit code 3): an unloadable case, an untraceable program, bad relations."""


def _numpy(values: dict) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().double().numpy() if v.is_floating_point() else v.detach().cpu().numpy()
            for k, v in values.items()}


def capture_case(case: Case, world_size: int | None = None, progress: Progress = None):
    """Trace the single-device program and every rank; returns graphs and input values."""
    try:
        from .frontends import torch_capture as tc
    except ImportError as exc:
        raise InputError(f"capturing a live PyTorch case needs torch ({exc}); install shardproof[torch]") from None
    world = world_size or case.world_size
    say = progress or (lambda msg: None)
    if case.train is not None:
        return _capture_training(case, world, say)
    try:
        say("capturing the single-device program")
        seq = tc.capture_single(case.single, case.inputs)
        seq_values = _numpy(tc.program_inputs(case.single, case.inputs))
        graphs, rank_values = [], []
        for rank in range(world):
            say(f"capturing rank {rank} of {world}")
            data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else case.inputs
            graph, program = tc.capture_rank(case.distributed, rank, world, data)
            graphs.append(graph)
            rank_values.append(_numpy(tc.program_inputs(program, data)))
    except tc.CaptureError as exc:
        raise InputError(str(exc)) from None
    return seq, DistributedProgram(graphs), seq_values, rank_values


def _capture_training(case: Case, world: int, say):
    """Trace the reference training step and every rank's ``train_step``."""
    from .frontends import torch_capture as tc
    from .frontends import torch_train as tt
    try:
        say("capturing the single-device training step")
        seq, seq_inputs = tt.capture_single_step(case.single, case.inputs, case.train)
        graphs, rank_values = [], []
        for rank in range(world):
            say(f"capturing rank {rank} of {world} (training step)")
            data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else case.inputs
            graph, inputs = tt.capture_rank_step(case.distributed, rank, world, data, case.train)
            graphs.append(graph)
            rank_values.append(_numpy(inputs))
    except tc.CaptureError as exc:
        raise InputError(str(exc)) from None
    return seq, DistributedProgram(graphs), _numpy(seq_inputs), rank_values


GRADIENT_OUTPUTS = ("grad:", "updated:")


def training_expectations(seq: Graph, dist: DistributedProgram, bindings: dict) -> tuple[DistributedProgram, dict]:
    """A parameter's gradient and updated value are expected to relate to the single-device
    ones as the parameter does. Distributed outputs are renamed after the single-device
    parameter they belong to (``grad:<dist param>`` -> ``grad:<single param>``)."""
    expect, renamed = {}, {}
    for name in dist.graphs[0].outputs:
        prefix = next((p for p in GRADIENT_OUTPUTS if name.startswith(p)), None)
        b = bindings.get(name[len(prefix):]) if prefix else None
        if b is None:
            continue
        seq_name = prefix + b.seq_name
        if seq_name not in seq.outputs:
            raise RelationError(f"the distributed step returns {name}, but the single-device parameter it relates to "
                                f"({b.seq_name}) has no {prefix[:-1]} output")
        renamed[name] = seq_name
        expect[seq_name] = b.relation
    graphs = [replace(g, outputs={renamed.get(k, k): v for k, v in g.outputs.items()}) for g in dist.graphs]
    return DistributedProgram(graphs), expect


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


def prepare(case: Case, world_size: int | None = None, relations: dict | None = None,
            relations_file: str | None = None, progress: Progress = None) -> Prepared:
    """Capture `case` at `world_size` (default: the case's) and relate its inputs.

    `relations` (name/glob -> relation) and a YAML `relations_file` add to and override
    the case's own relations; inputs no one names are related by value matching."""
    spec = parse_spec(case.relations, source=f"relations of case {case.name or '?'}")
    spec.update(parse_spec(relations, source="relations"))
    expect = {name: parse_relation(rel) for name, rel in (case.expect or {}).items()}
    if relations_file:
        file = load_yaml(relations_file)
        if any(file.constants.values()) or any(e.seq_name for e in file.expect.values()):
            raise RelationError(f"{relations_file}: constants: and expectations with of: are for graph dumps; a "
                                f"live case's constants have values and its outputs have the same names")
        spec.update(file.inputs)
        expect.update({name: e.relation for name, e in file.expect.items()})
    seq, dist, seq_values, rank_values = capture_case(case, world_size, progress)
    bindings = resolve_inputs({n.name: n.shape for n in seq.inputs},
                              [{n.name: n.shape for n in g.inputs} for g in dist.graphs],
                              spec, seq_values, rank_values)
    if case.train is not None:
        dist, expected = training_expectations(seq, dist, bindings)
        expect = {**expected, **_expand_globs(expect, list(seq.outputs))}
    for name in expect:
        if name not in seq.outputs:
            raise RelationError(f"the expectation names output {name!r}, but the single-device program's outputs "
                                f"are: {', '.join(seq.outputs)}")
    gradients = frozenset(n for n in seq.outputs if n.startswith(GRADIENT_OUTPUTS)) if case.train else frozenset()
    return Prepared(seq, dist, bindings, expect, _integer_inputs(seq_values), case.name, gradients)


def prepare_dumps(seq_path, dist_path, relations_file: str | None = None, auto_relations: bool = False,
                  expect: dict | None = None, kind: str | None = None, progress: Progress = None) -> Prepared:
    """Load graph dumps (never executed) and relate them: `seq_path` is the single-device
    program (a dump file, or a directory holding one rank), `dist_path` the distributed one
    (a directory of per-rank ``<kind>.g<N>.r<rank>.py`` files, or a list of files).

    Input relations come from the YAML `relations_file` (``inputs:``), then, with
    `auto_relations`, from names and shapes. Outputs are compared as
    :func:`~shardproof.relations.infer.resolve_outputs` says: the file's ``expect:`` section
    and `expect` ({distributed output: relation | "R of SEQ_NAME"}, which overrides it) pick
    the outputs and relations; by default every single-device output must be recoverable.
    `kind` (fw, bw, both) picks the graph in directories holding several."""
    say = progress or (lambda msg: None)
    file = load_yaml(relations_file) if relations_file else RelationsFile()
    wanted = {**file.expect, **parse_spec(expect, source="expectations")}
    kind = kind or _dump_kind([p for p in (seq_path, dist_path) if isinstance(p, (str, os.PathLike))
                               and os.path.isdir(p)])
    say("reading the single-device dump")
    seq_graphs = load_program(seq_path, kind=kind, constants=file.constants["seq"])
    if len(seq_graphs) != 1:
        raise InputError(f"{seq_path}: the single-device program must be one graph, but {len(seq_graphs)} rank "
                         f"files were found")
    seq = seq_graphs[0]
    say("reading the distributed dumps")
    graphs = load_program(dist_path, kind=kind, constants=file.constants["dist"])
    bindings = resolve_inputs({n.name: n.shape for n in seq.inputs},
                              [{n.name: n.shape for n in g.inputs} for g in graphs], file.inputs,
                              by_shape=auto_relations,
                              labels=[str(g.inputs[0].origin) if g.inputs else g.label for g in graphs])
    pairs = resolve_outputs([n.name for n in seq.outputs.values()],
                            [[n.name for n in g.outputs.values()] for g in graphs], wanted)
    seq = replace(seq, outputs={s: _output(seq, s) for s in pairs})
    dist = DistributedProgram([replace(g, outputs={s: _output(g, d) for s, (d, _) in pairs.items()})
                               for g in graphs])
    name = f"{os.fspath(seq_path)} vs {os.fspath(dist_path)}" if isinstance(dist_path, (str, os.PathLike)) else ""
    return Prepared(seq, dist, bindings, {s: rel for s, (_, rel) in pairs.items() if rel is not None}, {}, name)


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
                relations_file: str | None = None, progress: Progress = None) -> Report:
    """Capture and verify `case` (see :func:`prepare` for the options)."""
    p = prepare(case, world_size, relations, relations_file, progress)
    if progress:
        progress(f"verifying {p.dist.world_size} ranks")
    return verify_prepared(p)


def verify_dumps(seq_path, dist_path, relations_file: str | None = None, auto_relations: bool = False,
                 expect: dict | None = None, kind: str | None = None, progress: Progress = None) -> Report:
    """Load and verify graph dumps (see :func:`prepare_dumps` for the options)."""
    p = prepare_dumps(seq_path, dist_path, relations_file, auto_relations, expect, kind, progress)
    if progress:
        progress(f"verifying {p.dist.world_size} ranks")
    return verify_prepared(p)


def verify_prepared(p: Prepared) -> Report:
    report = verify_graphs(p.seq, p.dist, p.bindings, p.expect, examples=p.examples, name=p.name,
                           gradients=p.gradients)
    if p.gradients:
        report.parameters = parameter_table(p, report)
    return report


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
        rows.append(row)
    return rows


def cross_check(p: Prepared, seeds=(0, 1, 2)) -> list[str]:
    """Outputs that differ numerically between the programs on random inputs (a test
    oracle for the proof rules: a verified case must never differ)."""
    bad = set()
    for seed in seeds:
        bad.update(differing_outputs(p.seq, p.dist, p.bindings, p.expect, p.examples, seed=seed)[0])
    return sorted(bad)


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
