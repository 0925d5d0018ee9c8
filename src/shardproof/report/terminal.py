"""The terminal report (rich): verdict, outputs, findings with counterexamples, the input
relations that were assumed, and the assumptions every verdict rests on."""
from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..engine.result import Report

STYLE = {"verified": "bold green", "violation": "bold red", "unknown": "bold yellow"}


def verdict_line(report: Report) -> Text:
    text = Text()
    text.append(report.status.upper(), style=STYLE[report.status])
    if report.strength:
        text.append(f" ({report.strength})")
    text.append(f"  {report.name or 'case'} at world size {report.world_size}")
    if "wall_seconds" in report.stats:  # the whole run, the proof split out
        proof = f" (proof {report.stats['seconds']:.2f} s)" if "seconds" in report.stats else ""
        text.append(f"  [{report.stats['wall_seconds']:.2f} s{proof}, {report.stats.get('nodes_dist', 0)} "
                    f"distributed nodes]", style="dim")
    elif "seconds" in report.stats:
        text.append(f"  [{report.stats['seconds']:.2f} s, {report.stats.get('nodes_dist', 0)} distributed nodes]",
                    style="dim")
    return text


def stages_line(timings: dict) -> Text:
    """Seconds per stage, the executor, and each worker's share of the units."""
    stages = " · ".join(f"{name} {s:.2f} s" for name, s in timings["stages"].items())
    workers: dict[str, list] = {}
    for u in timings["units"]:
        workers.setdefault(u["worker"], []).append(u["seconds"])
    shares = ", ".join(f"{w} {sum(s):.2f} s ({len(s)} unit{'s' if len(s) != 1 else ''})" for w, s in workers.items())
    return Text(f"stages: {stages}  [{timings['executor']}" + (f"; {shares}" if shares else "") + "]", style="dim")


def _outputs(report: Report) -> Table:
    table = Table(title="outputs", title_justify="left", show_edge=False)
    table.add_column("output")
    table.add_column("expected")
    table.add_column("proved")
    for o in report.outputs:
        table.add_row(o.name, o.expected, Text(o.holds, style="green") if o.ok else Text("not proved", style="red"))
    return table


def _parameters(report: Report) -> Table:
    """Training steps: the relation each parameter's gradient and updated value hold."""
    table = Table(title="parameters (training step)", title_justify="left", show_edge=False)
    table.add_column("parameter")
    table.add_column("relation")
    table.add_column("gradient")
    with_updates = any("updated" in row for row in report.parameters)
    if with_updates:
        table.add_column("updated")
    for row in report.parameters:
        cells = [row["gradient"]] + ([row.get("updated")] if with_updates else [])
        table.add_row(row["parameter"], row["relation"],
                      *[Text(c, style="green") if c else Text("not proved", style="red") for c in cells])
    stated = [row["parameter"] for row in report.parameters if row.get("stated")]
    if stated:
        table.caption = ("judged by the placements of the DTensor the step returns (not the parameter's): "
                         + ", ".join(stated))
        table.caption_justify = "left"
    return table


def _relations(report: Report) -> Table:
    table = Table(title="input relations", title_justify="left", show_edge=False)
    table.add_column("distributed input")
    table.add_column("relation")
    table.add_column("of single-device")
    table.add_column("how")
    for name, rel in report.relations.items():
        table.add_row(name, rel["relation"], rel["of"], rel["how"])
    return table


def _pairing(report: Report) -> Text:
    """Dumps with --auto-relations: the outputs paired, and those left out with why."""
    paired = [f"{p['single_device']}" + ("" if p["distributed"] == p["single_device"] else f" ~ {p['distributed']}")
              + f" ({p['paired']})" for p in report.pairing if "paired" in p]
    left: dict[str, list] = {}
    for p in report.pairing:
        if "left_out" in p:
            left.setdefault(p["left_out"], []).append(p["single_device"])
    text = Text("outputs paired: " + ", ".join(paired), style="dim")
    for why, names in left.items():
        text.append(f"\nleft out: {', '.join(names)}: {why}", style="dim")
    return text


def _spans(ranks: list) -> str:
    """Ranks as runs: [0, 1, 2, 5] -> '0-2, 5'."""
    runs: list = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def rank_classes_text(report: Report) -> str:
    """Training cases captured one rank per class: which ranks each traced rank stood for,
    and the microbatches grouped by equal programs (issue 16)."""
    parts = []
    for c in report.rank_classes:
        how = "derived from" if c["derived"] else "each traced, like"
        others = [r for r in c["ranks"] if r != c["representative"]]
        part = f"rank {c['representative']}" + (f" ({how} it: {_spans(others)})" if others else " (alone)")
        if len(c.get("microbatch_classes") or ()) > 1:
            part += " microbatches " + " | ".join(_spans(m) for m in c["microbatch_classes"])
        if c.get("microbatch_loop"):  # frontends/microbatches.py
            loop = c["microbatch_loop"]
            part += f" (microbatches {_spans(loop['derived'])} derived from {loop['generic']})"
        parts.append(part)
    induced = (report.stats or {}).get("microbatch_induction") or {}
    if induced.get("by_induction"):  # engine/induction.py
        parts[-1] += f"; proof: microbatches {_spans(induced['by_induction'])} by induction " \
                     f"from {_spans(induced['checked'])}"
    return "rank classes: " + "; ".join(parts)


def parametric_text(report: Report) -> str | None:
    """The dp class members proved with their batch block as a parameter (engine/parametric.py)."""
    ranks = ((report.stats or {}).get("class_proof") or {}).get("parametric", {}).get("ranks") or []
    if not ranks:
        return None
    return f"proved with the batch block as a parameter: ranks {_spans([r['rank'] for r in ranks])}"


def _finding(i: int, f) -> Panel:
    lines = [Text.assemble(("kind: ", "bold"), f.kind),
             Text.assemble(("where: ", "bold"), f"node {f.node} ({f.op}) on rank(s) {', '.join(map(str, f.rank))}"
                           + (f" at {f.source}" if f.source else "")),
             Text.assemble(("expected: ", "bold"), f.expected, ("   actual: ", "bold"), f.actual),
             Text(f.message)]
    if f.counterexample:
        cex = {**f.counterexample, **(f.counterexample.get("display") or {})}  # the values as printed
        lines.append(Text("counterexample:", style="bold"))
        if cex.get("inputs"):
            lines.append(Text("  inputs: " + "; ".join(f"{k} = {v}" for k, v in cex["inputs"].items()), style="dim"))
        lines.append(Text(f"  single-device {cex.get('tensor') or ''}{cex.get('index', '')}:\n    "
                          + str(cex.get("single_device")).replace("\n", "\n    ")))
        lines.append(Text(f"  rank {cex.get('rank')} holds:\n    " + str(cex.get("distributed")).replace("\n", "\n    ")))
    if f.hint:
        lines.append(Text.assemble(("hint: ", "bold cyan"), f.hint))
    if f.fix:
        lines.append(Text.assemble(("proved fix: ", "bold green"), f.fix))
    return Panel(Group(*lines), title=f"finding {i}", title_align="left", border_style="red")


def render(report: Report, console: Console | None = None, verbose: bool = False) -> None:
    """Print the report; the input relations when `verbose` or when not verified."""
    console = console or Console()
    console.print(verdict_line(report))
    timings = report.stats.get("timings")
    if timings and (verbose or timings["executor"] != "serial"):  # where the units of work ran, when asked or parallel
        console.print(stages_line(timings))
    if report.reason:
        console.print(Text(report.reason, style="yellow"))
    if report.confirmation is not None:
        c = report.confirmation
        style = {"confirmed": "green", "contradicted": "bold red"}.get(c.outcome, "yellow")
        console.print(Text(c.describe() + (f"  [{c.seconds:.2f} s]" if c.seconds else ""), style=style))
    if report.blocks:  # a layer stack by block contracts: which layers share which proof
        console.print(Text(report.blocks["summary"] + ": " + "; ".join(
            f"layers {', '.join(map(str, c['layers']))}: {c['status']}" for c in report.blocks["contracts"]), style="bold"))
    for stage in (report.plan or {}).get("stages", []):  # a plan in stages: what each proved where
        console.print(Text(f"stage {stage['stage']}: {stage['status']}; proved at {stage['proved']}; confirmed "
                           f"{stage['confirmed']}", style="bold"))
    if report.parameters:
        console.print(_parameters(report))
        report_outputs = [o for o in report.outputs if not o.name.startswith(("grad:", "updated:"))]
        console.print(_outputs(Report(report.status, report.world_size, outputs=report_outputs)))
    else:
        console.print(_outputs(report))
    if report.pairing:
        console.print(_pairing(report))
    if report.partial_outputs:
        console.print(Text("verified up to a reduction the graph does not contain: " + ", ".join(
            report.partial_outputs) + " (partial sums across the ranks, allowed)", style="yellow"))
    if report.rank_classes:
        console.print(Text(rank_classes_text(report), style="dim"))
        if parametric_text(report):
            console.print(Text(parametric_text(report), style="dim"))
    for i, f in enumerate(report.findings, 1):
        console.print(_finding(i, f))
    if verbose or report.status != "verified":
        console.print(_relations(report))
    console.print(Text("assumes: " + "; ".join(report.assumptions), style="dim"))
