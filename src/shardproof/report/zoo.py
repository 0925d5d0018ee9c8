"""Zoo report: one row per catalogue case -- expected and actual verdict, whether the
first finding is where the case says, seconds (sources: ``shardproof zoo --list``, JSON)."""
from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table


def zoo_json(results: list) -> dict:
    rows = [r.to_json() for r in results]
    return {"ok": all(r.ok for r in results), "totals": dict(Counter("ok" if r.ok else "failed" for r in results)),
            "cases": rows}


def render_zoo(results: list, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="zoo", title_justify="left")
    table.add_column("case", no_wrap=True, overflow="ellipsis", max_width=40)
    for col in ("expected", "actual"):
        table.add_column(col, no_wrap=True, min_width=9)
    table.add_column("where", no_wrap=True, min_width=5)
    table.add_column("s", justify="right", no_wrap=True)
    for r in results:
        located = {True: "match", False: "[bold red]MISMATCH[/]", None: ""}[r.located]
        actual = r.verdict if r.ok or r.expected.verdict == "pending" else f"[bold red]{r.verdict}[/]"
        table.add_row(r.name, r.expected.verdict, actual or "-", located, f"{r.seconds:.2f}")
    console.print(table)
    for r in results:
        if not r.ok:
            console.print(f"[bold red]NOT AS EXPECTED[/] {r.name}: expected {r.expected.verdict} "
                          f"{r.expected.where()}; got {r.verdict} {r.finding or r.error}", soft_wrap=True)
        elif r.expected.verdict == "pending":
            console.print(f"[dim]{r.name}: {r.expected.detail}[/]", soft_wrap=True)
    ok = sum(r.ok for r in results)
    console.print(f"{ok} of {len(results)} cases as expected")
