"""Pipeline positions of findings: the stage and microbatch a rank's node ran in, as the
pipeline schedule marked it at capture (``Graph.positions``)."""
from __future__ import annotations


def position_of(graph, node: str):
    """(stage, microbatch) of `node` in `graph`, or None where no schedule marked it."""
    return (getattr(graph, "positions", None) or {}).get(node)


def name_positions(findings: list, dist) -> None:
    """Set each finding's ``stage`` and ``microbatch`` from its first rank's graph, and say
    them in its message."""
    for f in findings:
        if not f.rank or f.rank[0] >= len(dist.graphs):
            continue
        where = position_of(dist.graphs[f.rank[0]], f.node)
        if where is None:
            continue
        f.stage, f.microbatch = where
        said = ", ".join(([f"pipeline stage {f.stage}"] if f.stage is not None else []) +
                         ([f"microbatch {f.microbatch}"] if f.microbatch is not None else []))
        f.message = f"{f.message} [{said} on rank {f.rank[0]}]"
