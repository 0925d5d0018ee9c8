"""One distributed program from a directory of per-rank ``print_readable()`` dumps
(``<kind>[.<graph>].r<rank>.py``) or a list of files: each parsed by
:func:`shardproof.frontends.fx_text.load_graph`."""
from __future__ import annotations

import os
import re
from typing import Any

from ..ir.graph import Graph
from .dump_decomp import decompose_unruled
from .fx_text import DumpError, load_graph

__all__ = ["dump_kinds", "dump_graphs", "load_program"]

_RANK_RE = re.compile(r"\.r(\d+)\.py$")


def rank_of(path: str) -> int | None:
    m = _RANK_RE.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def dump_kinds(directory) -> list[str]:
    """The graph kinds (``fw``, ``bw``, ``both``...) of the per-rank dumps in a directory."""
    return sorted({f.split(".", 1)[0] for f in os.listdir(directory) if _RANK_RE.search(f)})


def dump_graphs(directory, kind: str) -> list[str]:
    """The graph names (``g0``, ``g1``...) of the `kind` dumps in a directory."""
    pat = re.compile(r"^" + re.escape(kind) + r"\.(.+?)\.r\d+\.py$")
    return sorted({m.group(1) for m in map(pat.match, os.listdir(directory)) if m})


def load_program(paths_or_dir, kind: str = "fw", *, graph: str | None = None,
                 groups: dict[str, Any] | None = None, symbols: dict[str, int] | None = None,
                 constants: dict[str, float] | None = None) -> list[Graph]:
    """One distributed program: a directory of per-rank dumps named ``<kind>[.<graph>].r<N>.py``
    (``kind`` picks ``fw``/``bw``/``both``; ``graph`` picks e.g. ``g0`` when several exist),
    or an explicit list of files. Graphs come back sorted by rank number; collective group
    names resolve against ``groups``, else to all ``len(files)`` ranks. ``constants`` gives
    tensor constants' values (see :func:`parse_graph`); each must name a constant of some rank."""
    where = os.fspath(paths_or_dir) if isinstance(paths_or_dir, (str, os.PathLike)) else None
    if isinstance(paths_or_dir, (str, os.PathLike)) and os.path.isdir(paths_or_dir):
        d = os.fspath(paths_or_dir)
        pat = re.compile(r"^" + re.escape(kind) + r"(?:\.(?P<mid>.+?))?\.r(?P<rank>\d+)\.py$")
        found: dict[str, list[str]] = {}
        for f in sorted(os.listdir(d)):
            m = pat.match(f)
            if m:
                found.setdefault(m.group("mid") or "", []).append(os.path.join(d, f))
        if graph is not None and graph not in found and found:
            raise DumpError(d, None, f"no {kind} graph {graph!r} (its {kind} graphs: {', '.join(sorted(found))})")
        if graph is not None:
            found = {k: v for k, v in found.items() if k == graph}
        if not found:
            kinds = dump_kinds(d)
            other = f" (found: {', '.join(kinds)})" if kinds else ""
            raise DumpError(d, None, f"no {kind}[.<graph>].r<N>.py files{other}")
        if len(found) > 1:
            raise DumpError(d, None, f"several {kind} graphs ({', '.join(sorted(found))}): pick one with --graph "
                                     f"(graph= in the API)")
        paths = next(iter(found.values()))
    elif isinstance(paths_or_dir, (str, os.PathLike)):
        if not os.path.exists(paths_or_dir):
            raise DumpError(os.fspath(paths_or_dir), None, "no such file or directory")
        paths = [os.fspath(paths_or_dir)]
    else:
        paths = [os.fspath(p) for p in paths_or_dir]
    if not paths:
        raise DumpError("<program>", None, "no files given")
    ranks = [rank_of(p) for p in paths]
    if any(r is not None for r in ranks):
        missing = [p for p, r in zip(paths, ranks) if r is None]
        if missing:
            raise DumpError(missing[0], None, "no rank number in the file name (expected ...r<N>.py)")
        order = sorted(range(len(paths)), key=lambda i: ranks[i])
        paths = [paths[i] for i in order]
        ranks = [ranks[i] for i in order]
        if ranks != list(range(len(paths))):
            dup = sorted({r for r in ranks if ranks.count(r) > 1})
            odd = next(i for i, r in enumerate(ranks) if r != i)
            what = f"rank {dup[0]} given twice" if dup else \
                f"ranks {ranks} are not 0..{len(paths) - 1} (no file for rank {odd})"
            raise DumpError(paths[odd], None, f"{what}: a program needs one file per rank")
    else:
        ranks = list(range(len(paths)))
    world = len(paths)
    graphs = []
    for r, p in zip(ranks, paths):
        g = decompose_unruled(load_graph(p, groups=groups, world_size=world, symbols=symbols, rank=r,
                                         constants=constants))
        g.label = f"rank {r} ({os.path.basename(p)})"
        graphs.append(g)
    known = {n.name for g in graphs for n in g.nodes if n.op == "constant"}
    unknown = sorted(set(constants or {}) - known)
    if unknown:
        raise DumpError(where or paths[0], None,
                        f"a value is given for constant(s) {', '.join(unknown)}, which the program does not read "
                        f"(its constants: {', '.join(sorted(known)) or 'none'})")
    return graphs


