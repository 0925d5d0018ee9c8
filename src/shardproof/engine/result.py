"""The verdict and its findings: the contract the CLI, JSON and HTML reports render."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

SCHEMA_VERSION = "1"


@dataclass
class Finding:
    kind: str
    rank: list[int]
    node: str
    op: str
    source: str | None
    expected: str
    actual: str
    message: str
    hint: str = ""
    counterexample: dict | None = None
    counterpart: str | None = None  # the single-device tensor the finding's tensor should relate to
    fix: str | None = None  # a proved repair, as a one-line hunk against the user's source (engine/repair.py)
    stage: int | None = None  # the pipeline stage and microbatch the node ran in (a pipeline schedule's finding)
    microbatch: int | None = None
    schedule_point: str | None = None  # outside any microbatch's work: where in the schedule (engine/positions.py)
    layer: int | None = None  # a layer stack verified by block contracts: the layer the finding is in


@dataclass
class NodeView:
    """One node as the graph views draw it: `status` is related | violated | unknown |
    unreached for a rank's node, related | violated | unmatched for a single-device node;
    `relation` says in words what it holds (or which ranks hold it)."""
    name: str
    op: str
    inputs: list[str]
    shape: str
    status: str
    relation: str
    source: str | None = None
    code: str = ""
    of: str | None = None  # a rank's node: the single-device tensor it relates to


@dataclass
class GraphView:
    label: str  # "single-device" or "rank R"
    nodes: list[NodeView]
    outputs: list[str]


@dataclass
class OutputCheck:
    name: str
    expected: str
    holds: str | None  # the relation that was proved, None when none was

    @property
    def ok(self) -> bool:
        return self.holds is not None


@dataclass
class Confirmation:
    """How a proof was confirmed by running the programs for real: `by` gloo (a local gloo
    process group, one process per rank), torch (graphs run with torch's kernels) or jax;
    `draws` value sets compared (the case's own plus fresh random ones); `outcome`
    confirmed | contradicted | skipped; `detail` says why (the first differing output,
    what could not be run)."""
    by: str
    draws: int = 0
    outcome: str = "skipped"
    detail: str = ""
    seconds: float = 0.0

    def describe(self) -> str:
        if self.outcome == "confirmed":
            return f"confirmed: {self.by}, {self.draws} draw{'s' if self.draws != 1 else ''}"
        return f"{self.outcome}: {self.by}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Report:
    status: str  # verified | violation | unknown
    world_size: int
    findings: list[Finding] = field(default_factory=list)
    outputs: list[OutputCheck] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    relations: dict[str, dict] = field(default_factory=dict)  # input -> {relation, of, how}
    parameters: list[dict] = field(default_factory=list)
    """Training steps: per parameter {parameter, relation, gradient, updated} (the relation
    each holds, None where none was proved)."""
    stats: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    strength: str | None = None
    name: str = ""
    graphs: list[GraphView] = field(default_factory=list)  # per-node relations, when asked for (not in JSON)
    confirmation: Confirmation | None = None  # the proof run for real (a verified needs "confirmed")
    pairing: list[dict] = field(default_factory=list)  # dumps, --auto-relations: outputs paired / left out
    temporal: dict | None = None  # live cases: the temporal checks (engine/temporal.py), None when not run
    blocks: dict | None = None  # a layer stack verified by block contracts (engine/blocks.py), else None
    plan: dict | None = None  # a whole plan verified in stages (plan_e2e.py): what each stage proved where, else None
    rank_classes: list[dict] = field(default_factory=list)
    """Training cases captured one rank per class: {representative, ranks, derived,
    microbatch_classes} (frontends/rank_classes.py); empty where every rank was captured."""
    partial_outputs: list[str] = field(default_factory=list)
    """Dumps: outputs verified only up to a reduction the graph does not contain (partial
    sums the user allowed, engine/partial_outputs.py)."""

    def __repr__(self) -> str:  # short, so that a failed `assert report.status == ...` stays readable
        first = self.findings[0] if self.findings else None
        found = f", first finding {first.kind} at node {first.node} ({first.op}) on ranks {first.rank}" \
            f"{' at ' + first.source if first.source else ''}" if first else ""
        why = f", reason {self.reason[:200]!r}" if self.reason and not first else ""
        return f"Report({self.status}, {self.name or 'case'} at world size {self.world_size}{found}{why})"

    @property
    def exit_code(self) -> int:
        return {"verified": 0, "violation": 1, "unknown": 2}[self.status]

    def to_json(self) -> dict:
        d = {"schema_version": SCHEMA_VERSION, **asdict(replace(self, graphs=[]))}
        del d["graphs"]
        d["outputs"] = [dict(asdict(o), ok=o.ok) for o in self.outputs]
        return d
