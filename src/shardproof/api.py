"""The Python API: capture a :class:`~shardproof.case.Case` and verify it.

This is the one place that ties the layers together (capture -> relations -> engine);
the CLI is a thin shell over it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .case import Case
from .engine.result import Report
from .engine.verify import differing_outputs, verify_graphs
from .ir.graph import DistributedProgram, Graph
from .relations.infer import load_yaml, parse_spec, resolve_inputs
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


@dataclass
class Prepared:
    """A captured case with its input relations: everything the engine needs."""
    seq: Graph
    dist: DistributedProgram
    bindings: dict
    expect: dict
    examples: dict
    name: str = ""


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
    for name in expect:
        if name not in seq.outputs:
            raise RelationError(f"the expectation names output {name!r}, but the single-device program's outputs "
                                f"are: {', '.join(seq.outputs)}")
    return Prepared(seq, dist, bindings, expect, _integer_inputs(seq_values), case.name)


def verify_case(case: Case, world_size: int | None = None, relations: dict | None = None,
                relations_file: str | None = None, progress: Progress = None) -> Report:
    """Capture and verify `case` (see :func:`prepare` for the options)."""
    p = prepare(case, world_size, relations, relations_file, progress)
    if progress:
        progress(f"verifying {p.dist.world_size} ranks")
    return verify_prepared(p)


def verify_prepared(p: Prepared) -> Report:
    return verify_graphs(p.seq, p.dist, p.bindings, p.expect, examples=p.examples, name=p.name)


def cross_check(p: Prepared, seeds=(0, 1, 2)) -> list[str]:
    """Outputs that differ numerically between the programs on random inputs (a test
    oracle for the proof rules: a verified case must never differ)."""
    bad = set()
    for seed in seeds:
        bad.update(differing_outputs(p.seq, p.dist, p.bindings, p.expect, p.examples, seed=seed)[0])
    return sorted(bad)


def _integer_inputs(values: dict) -> dict:
    """Integer data (token ids, labels) keep their example values; floats are drawn small."""
    return {k: v for k, v in values.items() if not np.issubdtype(v.dtype, np.floating)}
