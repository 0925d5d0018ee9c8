"""pytest helpers: load a case file, assert a verdict, get the report back.

    from shardproof.testing import assert_verified, assert_violation, load_case

    def test_tp_mlp():
        assert_verified("cases/tp_mlp.py", world_size=4)

    def test_missing_allreduce_is_caught():
        report = assert_violation("cases/bad.py", world_size=2, at="bad.py:31", kind="missing-allreduce")

A failed assertion's message is the rendered terminal report (plain text), not a
dataclass repr. ``case_or_path`` is a :class:`~shardproof.Case` or the path of a case file
(a Python file defining ``case(world_size)``). Other keyword options go to the
verification (``relations``, ``relations_file``, ``confirm_draws``, ``views``);
``cross_check=True`` also runs both programs' reference numerics on random inputs and
asserts they agree (verified) or differ (violation).
"""
from __future__ import annotations

import io
import os
from typing import Iterable, Optional, Union

from .case import Case
from .engine.result import Finding, Report

CaseOrPath = Union[Case, str, "os.PathLike[str]"]


def load_case(path, world_size: Optional[int] = None) -> Case:
    """Import the case file at `path` and return ``case(world_size)`` (``case()`` when
    `world_size` is None); the case's world size is set to `world_size` when given."""
    from .cli import UsageError, load_case_module
    try:
        module = load_case_module(os.fspath(path))
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    case = module.case(world_size) if world_size else module.case()
    if not isinstance(case, Case):
        raise TypeError(f"case({world_size or ''}) in {path} returned {type(case).__name__}, not a shardproof.Case")
    if world_size:
        case.world_size = world_size
    return case


def rendered(report: Report, width: int = 120) -> str:
    """The terminal report as plain text (no colour, no terminal codes)."""
    from rich.console import Console

    from .report.terminal import render
    out = io.StringIO()
    render(report, Console(file=out, no_color=True, force_terminal=False, width=width, highlight=False),
           verbose=True)
    return out.getvalue()


def check(case_or_path: CaseOrPath, world_size: Optional[int] = None, cross_check: bool = False, **options):
    """Capture and verify; returns (report, the outputs that differ numerically on random
    inputs, or None when `cross_check` is off)."""
    from . import api
    case = case_or_path if isinstance(case_or_path, Case) else load_case(case_or_path, world_size)
    p = api.prepare(case, world_size, options.pop("relations", None), options.pop("relations_file", None))
    report = api.verify_prepared(p, **options)
    return report, (api.cross_check(p) if cross_check else None)


def _fail(why: str, report: Report) -> None:
    raise AssertionError(f"{why}\n\n{rendered(report)}")


def assert_verified(case_or_path: CaseOrPath, world_size: Optional[int] = None, **options) -> Report:
    """Assert the case is verified (a proof, confirmed by execution); returns the report."""
    report, differing = check(case_or_path, world_size, **options)
    if report.status != "verified" or report.strength != "proof":
        _fail(f"expected verified, got {report.status}", report)
    if differing:
        _fail(f"verified, but the reference numerics differ on outputs {differing}: an unsound rule", report)
    return report


def _matches(f: Finding, at: str) -> bool:
    """`at` names the finding's node, its op, or its source line (``file:line``, a suffix of
    the source's path, or the file's name alone)."""
    if at in (f.node, f.op):
        return True
    source = str(f.source) if f.source else ""
    where = source.split(" ")[0]
    if not source:
        return False
    if where == at or where.endswith(("/" + at, os.sep + at)):
        return True
    file, _, line = where.rpartition(":")
    if os.path.basename(file) == (at[:-1] if at.endswith(":") else at):  # a file's name alone ("x.py" or "x.py:")
        return True
    a_file, _, a_line = at.rpartition(":")
    return bool(file and a_file) and line == a_line and os.path.abspath(file) == os.path.abspath(a_file)


def assert_violation(case_or_path: CaseOrPath, world_size: Optional[int] = None, at: Union[str, Iterable[str], None] = None,
                     kind: Optional[str] = None, ranks: Optional[Iterable[int]] = None, **options) -> Report:
    """Assert the case is a violation whose first finding is `at` (a node name, an op or
    a ``file:line``; several: all must match), of bug class `kind`, on `ranks`; returns
    the report."""
    report, differing = check(case_or_path, world_size, **options)
    if report.status != "violation" or not report.findings:
        _fail(f"expected a violation, got {report.status}", report)
    f = report.findings[0]
    wanted = [at] if isinstance(at, str) else list(at or ())
    missed = [a for a in wanted if not _matches(f, a)]
    if missed:
        _fail(f"expected the first finding at {', '.join(map(repr, missed))}; it is node {f.node} ({f.op}) at "
              f"{f.source}", report)
    if kind is not None and f.kind != kind:
        _fail(f"expected a {kind!r} finding, got {f.kind!r}", report)
    if ranks is not None and list(f.rank) != list(ranks):
        _fail(f"expected the finding on ranks {list(ranks)}, got {f.rank}", report)
    if differing is not None and not differing:
        _fail("a violation, but the reference numerics find no differing output", report)
    return report
