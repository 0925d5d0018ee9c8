"""Pipeline positions of findings: the stage and microbatch a rank's node ran in, as the
pipeline schedule marked it at capture (``Graph.positions``)."""
from __future__ import annotations


def position_of(graph, node: str):
    """(stage, microbatch) of `node` in `graph`, or None where no schedule marked it."""
    return (getattr(graph, "positions", None) or {}).get(node)


def schedule_point(graph, node: str):
    """(stage or None, where) for a node no schedule marked, on a rank whose graph has marked
    nodes (it runs pipeline stages): where it ran relative to the marked microbatches' work
    ('after the last microbatch': a gradient reduce or scaling after the schedule's step).
    The stage is the rank's when it holds one; None, and the stages said, when it holds
    several. None for a rank no schedule marked."""
    positions = getattr(graph, "positions", None) or {}
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    if not positions or node not in order:
        return None
    at = order[node]
    marked = sorted((order[n], where) for n, where in positions.items() if n in order)
    before = [w for i, w in marked if i < at]
    after = [w for i, w in marked if i > at]
    if not after:
        where = "after the last microbatch"
    elif not before:
        where = "before the first microbatch"
    else:
        where = f"between microbatches {before[-1][1]} and {after[0][1]}"
    stages = sorted({s for s, _ in positions.values() if s is not None})
    if len(stages) == 1:
        return stages[0], where
    return None, f"{where} (stages {', '.join(map(str, stages))} on this rank)"


def name_positions(findings: list, dist) -> None:
    """Set each finding's ``stage`` and ``microbatch`` from its first rank's graph, and say
    them in its message; a finding outside any microbatch's work on a pipeline rank gets the
    rank's stage and its :func:`schedule_point`."""
    for f in findings:
        if not f.rank or f.rank[0] >= len(dist.graphs):
            continue
        graph = dist.graphs[f.rank[0]]
        where = position_of(graph, f.node)
        if where is None:
            point = schedule_point(graph, f.node)
            if point is None:
                continue
            f.stage, f.schedule_point = point
            said = ([f"pipeline stage {f.stage}"] if f.stage is not None else []) + [f.schedule_point]
            f.message = f"{f.message} [{', '.join(said)} on rank {f.rank[0]}]"
            continue
        f.stage, f.microbatch = where
        said = ", ".join(([f"pipeline stage {f.stage}"] if f.stage is not None else []) +
                         ([f"microbatch {f.microbatch}"] if f.microbatch is not None else []))
        f.message = f"{f.message} [{said} on rank {f.rank[0]}]"


def odd_microbatches(classes: list) -> list[tuple[int, list, list]]:
    """(representative, odd microbatches, regular ones) of each rank class whose
    gradient-accumulation microbatches do not all run one program: the largest group of
    microbatches is the regular program, microbatch 0 (it starts the accumulation) may differ,
    any other microbatch outside that group is odd (``classes``: the report's rank_classes)."""
    out = []
    for c in classes:
        groups = c.get("microbatch_classes") or []
        if len(groups) < 2:
            continue
        regular = max(groups, key=len)
        odd = sorted(m for g in groups if g is not regular for m in g if m != 0)
        if odd and len(regular) > 1:
            out.append((c["representative"], odd, regular))
    return out


def name_odd_microbatches(findings: list, classes: list) -> None:
    """Say in each finding that has no microbatch of its own which microbatches run another
    program than the others (frontends/rank_classes.py): a bug in one microbatch only whose
    effect is found after the loop (a missing accumulation) is then still located."""
    odd = odd_microbatches(classes)
    if not odd:
        return
    said = "; ".join(f"on rank {rep}'s class, microbatch{'es' if len(m) > 1 else ''} {', '.join(map(str, m))} "
                     f"{'run' if len(m) > 1 else 'runs'} another program than microbatches {', '.join(map(str, reg))}"
                     for rep, m, reg in odd)
    for f in findings:
        if f.microbatch is None:
            f.message = f"{f.message} [{said}]"
