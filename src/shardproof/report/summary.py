"""Several runs of one command (case files, a directory, a ``-n`` sweep): a summary table
and the combined JSON, whose exit code is the worst of the runs' (order: verified 0 <
unknown 2 < violation 1 < bad input 3 < internal error 4)."""
from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..engine.result import SCHEMA_VERSION, Report
from .terminal import STYLE

EXIT_ORDER = (0, 2, 1, 3, 4)
"""Exit codes from best to worst."""


def worst_exit(codes) -> int:
    codes = list(codes)
    return max(codes, key=EXIT_ORDER.index) if codes else 0


def _detail(report: Report) -> str:
    if report.findings:
        f = report.findings[0]
        return f"{f.kind}: node {f.node} ({f.op})" + (f" at {os.path.basename(str(f.source))}" if f.source else "")
    return report.reason


def _code(result) -> int:
    return result.exit_code if isinstance(result, Report) else 3


def render_summary(rows: list[tuple], console: Console) -> None:
    """`rows`: (case, world size or None, Report or an error message)."""
    table = Table(title="summary", title_justify="left", show_edge=False)
    table.add_column("case", overflow="fold")
    table.add_column("ranks", justify="right")
    table.add_column("verdict", no_wrap=True)
    table.add_column("s", justify="right")
    table.add_column("finding / reason", overflow="fold", ratio=1)
    for case, n, result in rows:
        if isinstance(result, Report):
            seconds = result.stats.get("wall_seconds", result.stats.get("seconds"))
            table.add_row(case, str(result.world_size), Text(result.status.upper(), style=STYLE[result.status]),
                          f"{seconds:.2f}" if seconds is not None else "", _detail(result))
        else:
            table.add_row(case, str(n or ""), Text("ERROR", style="bold magenta"), "", result)
    console.print(table)
    code = worst_exit(_code(r) for _, _, r in rows)
    console.print(Text(f"{len(rows)} runs; exit code {code} (the worst: 0 verified < 2 unknown < 1 violation "
                       f"< 3 bad input)", style="dim"))


def summary_json(rows: list[tuple]) -> dict:
    runs = []
    for case, n, result in rows:
        if isinstance(result, Report):
            runs.append({"case": case, **result.to_json()})
        else:
            runs.append({"case": case, "world_size": n, "status": "error", "message": result, "exit_code": 3})
    return {"schema_version": SCHEMA_VERSION, "status": "summary", "exit_code": worst_exit(_code(r) for _, _, r in rows),
            "runs": runs}
