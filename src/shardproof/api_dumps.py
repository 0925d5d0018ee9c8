"""Graph dumps (FX, HLO, StableHLO) loaded and related: :func:`prepare_dumps` (see :mod:`.api`)."""
from __future__ import annotations

import os
import re
from dataclasses import replace

from .api_base import InputError, Prepared, Progress, _quiet
from .engine.verify import ENGINE_STAGES
from .frontends.fx_program import dump_graphs, dump_kinds, load_program
from .frontends.fx_text import read_dump
from .frontends.hlo_text import is_hlo_text, load_hlo_program, mark_shared_constants
from .frontends.stablehlo_text import is_stablehlo_text, load_stablehlo_program
from .ir.graph import DistributedProgram, Graph
from .relations.infer import RelationsFile, load_yaml, parse_spec, resolve_inputs, resolve_outputs
from .relations.pairing import pair_graph_outputs


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
