"""The zoo: a catalogue of program pairs -- correct models and injected bugs -- kept as
ordinary case files in this folder (models) and its sub-folders (``bugs/``, ...) that users
can read, run and copy. Each file defines ``case(world_size) -> Case``; a case's ``meta``
says what the zoo expects of it:

* nothing: a correct program, which must be verified;
* ``bug`` (the class), ``bug_node``, ``bug_op``, ``bug_ranks`` (``"all"`` or a list): a bug,
  which must be a violation whose first finding is there;
* ``unknown_op``: a program using an op without rules, which must be unknown naming it;
* ``known_gap``: a correct program the engine cannot prove yet (why), which must stay unknown;
* ``pending``: the missing feature a case waits for (listed, not run);
* ``source``: where the program or bug comes from (a paper, an upstream issue).

This module only lists and judges; capturing and verifying is :func:`shardproof.api.run_zoo`.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))


def catalogue(root: str = HERE) -> list[str]:
    """Case files under `root` (modules defining ``case``; shared helpers such as a small
    training framework are not cases), models first, then each sub-folder, sorted by name."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        out += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py") and not f.startswith("_")
                and _defines_case(os.path.join(folder, f))]
    return out


def _defines_case(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        return "\ndef case(" in f.read()


def selected(paths: list[str], pattern: Optional[str]) -> list[str]:
    """Paths whose case name (``bugs/missing_allreduce``) contains or glob-matches `pattern`."""
    if not pattern:
        return paths
    return [p for p in paths if pattern in entry_name(p) or fnmatch.fnmatch(entry_name(p), pattern)]


def entry_name(path: str, root: str = HERE) -> str:
    rel = os.path.relpath(path, root) if os.path.commonpath([os.path.abspath(path), root]) == root else \
        os.path.basename(path)
    return os.path.splitext(rel)[0].replace(os.sep, "/")


@dataclass
class Expectation:
    verdict: str  # verified | violation | unknown | pending
    node: Optional[str] = None
    op: Optional[str] = None
    ranks: Optional[list] = None
    kind: Optional[str] = None
    detail: str = ""  # the unknown op, or the feature a pending case waits for

    def where(self) -> str:
        if self.verdict == "violation":
            return f"{self.kind} at {self.node} ({self.op}) rank(s) {', '.join(map(str, self.ranks))}"
        return self.detail


def expectation(meta: dict, world_size: int) -> Expectation:
    if meta.get("pending"):
        return Expectation("pending", detail=f"pending: needs {meta['pending']}")
    if meta.get("unknown_op"):
        return Expectation("unknown", op=meta["unknown_op"], detail=f"unknown op {meta['unknown_op']}")
    if meta.get("known_gap"):
        return Expectation("unknown", detail=f"known gap: {meta['known_gap']}")
    if meta.get("bug"):
        ranks = list(range(world_size)) if meta["bug_ranks"] == "all" else list(meta["bug_ranks"])
        return Expectation("violation", meta["bug_node"], meta["bug_op"], ranks, meta["bug"])
    return Expectation("verified")


@dataclass
class ZooResult:
    name: str
    source: str
    world_size: int
    expected: Expectation
    verdict: str = ""
    located: Optional[bool] = None  # the first finding is where the meta says (violations only)
    finding: str = ""
    seconds: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        if self.expected.verdict == "pending":
            return True
        return self.verdict == self.expected.verdict and self.located is not False

    def to_json(self) -> dict:
        return {"case": self.name, "source": self.source, "world_size": self.world_size,
                "expected": self.expected.verdict, "expected_at": self.expected.where(), "actual": self.verdict,
                "location_match": self.located, "finding": self.finding, "ok": self.ok,
                "seconds": round(self.seconds, 3), "error": self.error}


def judge(result: ZooResult, report) -> ZooResult:
    """Fill `result` from a verification report against its expectation."""
    result.verdict = report.status
    want = result.expected
    if report.findings:
        f = report.findings[0]
        result.finding = f"{f.kind} at {f.node} ({f.op}) rank(s) {', '.join(map(str, f.rank))}"
        if want.verdict == "violation":
            result.located = (f.node, f.op, list(f.rank), f.kind) == (want.node, want.op, want.ranks, want.kind)
    if want.verdict == "unknown" and want.op:
        result.located = want.op in (report.reason or "")
        result.finding = report.reason or ""
    return result
