"""Mutation-testing report: per case and operator, how many mutants were killed, proved
equivalent, left undecided or -- a soundness bug -- survived."""
from __future__ import annotations

from collections import Counter, defaultdict

from rich.console import Console
from rich.table import Table

OUTCOMES = ("killed", "equivalent", "unknown", "unconfirmed", "survived")
HEADERS = {"killed": "killed", "equivalent": "equiv", "unknown": "unknown", "unconfirmed": "unconf", "survived": "SURVIVED"}


def mutants_json(results: dict[str, list]) -> dict:
    """{case: [outcomes]} as the JSON contract: totals and one entry per mutant."""
    rows = [{"case": case, "operator": o.mutant.operator, "mutant": o.mutant.what, "node": o.mutant.node,
             "ranks": o.mutant.ranks, "verdict": o.verdict, "outcome": o.outcome, "finding": o.finding,
             "seconds": round(o.seconds, 3)} for case, outs in results.items() for o in outs]
    return {"totals": dict(Counter(r["outcome"] for r in rows)), "mutants": rows}


def render_mutants(results: dict[str, list], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="mutants", title_justify="left")
    table.add_column("case", no_wrap=True, overflow="ellipsis", max_width=26)
    table.add_column("operator", no_wrap=True)
    for k in OUTCOMES:
        table.add_column(HEADERS[k], justify="right")
    table.add_column("s", justify="right")
    totals: Counter = Counter()
    for case, outcomes in results.items():
        by_op: dict[str, Counter] = defaultdict(Counter)
        seconds: Counter = Counter()
        for o in outcomes:
            by_op[o.mutant.operator][o.outcome] += 1
            seconds[o.mutant.operator] += o.seconds
        for op, counts in by_op.items():
            totals.update(counts)
            cells = [str(counts[k]) if counts[k] else "" for k in OUTCOMES]
            if counts["survived"]:
                cells[-1] = f"[bold red]{counts['survived']}[/]"
            table.add_row(case, op, *cells, f"{seconds[op]:.2f}")
    table.add_row("[bold]total[/]", f"[bold]{sum(totals.values())}[/]", *[str(totals[k]) for k in OUTCOMES], "")
    console.print(table)
    for case, outcomes in results.items():
        for o in outcomes:
            if o.outcome == "survived":
                console.print(f"[bold red]SURVIVED[/] {case}: {o.mutant.what} was verified but differs numerically "
                              f"(a soundness bug in the rules)")
    if not totals["survived"]:
        console.print(f"no survivors: {totals['killed']} killed, {totals['equivalent']} proved equivalent and "
                      f"confirmed numerically, {totals['unknown'] + totals['unconfirmed']} undecided")
