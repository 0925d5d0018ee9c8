"""Mutation-testing report: per case and operator, how many mutants were killed, proved
equivalent, left undecided or -- a soundness bug -- survived."""
from __future__ import annotations

from collections import Counter, defaultdict

from rich.console import Console
from rich.table import Table


def kill_rate(outcomes: list) -> float:
    """Killed mutants over those not proved equivalent (an equivalent mutant is no bug to kill)."""
    c = Counter(o.outcome for o in outcomes)
    live = len(outcomes) - c["equivalent"]
    return c["killed"] / live if live else 1.0


def mutants_json(results: dict[str, list]) -> dict:
    """{case: [outcomes]} as the JSON contract: totals and one entry per mutant."""
    rows = [{"case": case, "operator": o.mutant.operator, "mutant": o.mutant.what, "node": o.mutant.node,
             "ranks": o.mutant.ranks, "verdict": o.verdict, "outcome": o.outcome, "finding": o.finding,
             "seconds": round(o.seconds, 3)} for case, outs in results.items() for o in outs]
    every = [o for outs in results.values() for o in outs]
    return {"totals": dict(Counter(r["outcome"] for r in rows)), "kill_rate": round(kill_rate(every), 4),
            "mutants": rows}


def _table(title: str, key: str, rows: dict[str, list]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(key, no_wrap=True, overflow="ellipsis", max_width=36)
    for col in ("mutants", "killed", "equiv", "undecided", "SURVIVED", "s"):
        table.add_column(col, justify="right")
    for name, outs in rows.items():
        c = Counter(o.outcome for o in outs)
        survived = f"[bold red]{c['survived']}[/]" if c["survived"] else "0"
        table.add_row(name, str(len(outs)), str(c["killed"]), str(c["equivalent"]),
                      str(c["unknown"] + c["unconfirmed"]), survived, f"{sum(o.seconds for o in outs):.1f}")
    return table


def render_mutants(results: dict[str, list], console: Console | None = None) -> None:
    """Outcomes per case, then per mutation operator; survivors named one by one."""
    console = console or Console()
    by_operator: dict[str, list] = defaultdict(list)
    for outs in results.values():
        for o in outs:
            by_operator[o.mutant.operator].append(o)
    every = [o for outs in results.values() for o in outs]
    console.print(_table("mutants by case", "case", {**results, "total": every}))
    console.print(_table("mutants by operator", "operator", dict(by_operator)))
    totals = Counter(o.outcome for o in every)
    console.print(f"kill rate: {kill_rate(every):.1%} ({totals['killed']} killed of the "
                  f"{len(every) - totals['equivalent']} mutants not proved equivalent)")
    for case, outcomes in results.items():
        for o in outcomes:
            if o.outcome == "survived":
                why = o.finding or "differs numerically"
                console.print(f"[bold red]SURVIVED[/] {case}: {o.mutant.what} was verified, but {why} "
                              f"(a soundness bug in the rules)")
    if not totals["survived"]:
        console.print(f"no survivors: {totals['killed']} killed, {totals['equivalent']} proved equivalent and "
                      f"confirmed numerically, {totals['unknown'] + totals['unconfirmed']} undecided")
