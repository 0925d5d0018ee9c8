"""The HTML report: one self-contained page (inline CSS, JS and data; nothing fetched) with
the verdict, the findings, and the single-device graph beside the ranks' graphs.

Each graph is a column of its nodes in dataflow order, edges as arcs on the left; every node
shows its shape and its relation to the single-device program, a shape that differs from its
single-device counterpart's where nothing explains it highlighted. From three ranks, ranks
whose graphs are identical up to rank constants share a column ("ranks 0–7 (identical)"); a
chooser (or ``report.html#rank=R``) shows one rank beside the single device. Nodes are
coloured by relation status (related / violated / unknown / unreached; single-device nodes no
rank holds are 'unmatched'); the first finding's node is outlined. Clicking a node opens the
details in a side panel beside the graphs and highlights its inputs, the same tensor on the
other ranks and the single-device tensor it relates to; ``report.html#finding`` opens with
the first finding's node selected. The page carries its graphs as one deduplicated table
(:mod:`.html_data`) and its script (:mod:`.html_assets`) draws only the columns on view, so
an 8-layer TP-8 program stays a few hundred kB. It needs ``report.graphs`` (verify with
``views=True``); without them the page shows the verdict and findings only.
"""
from __future__ import annotations

import html

from ..engine.result import Finding, Report
from .html_assets import CSS, ERRORS_JS, JS
from .html_data import dumps_for_script, graph_data, rank_groups, source_href

STATUSES = ("related", "violated", "unknown", "unreached", "unmatched")
STATUS_TEXT = {"related": "related to the single-device program", "violated": "the first finding (violated)",
               "unknown": "no relation found", "unreached": "not reached",
               "unmatched": "single-device tensor no rank holds"}
__all__ = ["render_html", "source_href"]


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _source(source: str | None) -> str:
    href = source_href(source)
    if source is None:
        return "unknown"
    return f'<a href="{_esc(href)}">{_esc(source)}</a>' if href else _esc(source)


def _finding_html(i: int, f: Finding, goto: str | None) -> str:
    rows = [f'<h2>finding {i}: {_esc(f.kind)}</h2>',
            f'<div><b>where</b> node <code>{_esc(f.node)}</code> ({_esc(f.op)}) on rank(s) '
            f'{_esc(", ".join(map(str, f.rank)))} at {_source(f.source)}'
            + (f' &middot; <a href="#" data-goto="{goto}">show in graph</a>' if goto else "") + "</div>",
            f'<div><b>expected</b> {_esc(f.expected)} &nbsp; <b>actual</b> {_esc(f.actual)}</div>',
            f'<div>{_esc(f.message)}</div>']
    cex = f.counterexample and {**f.counterexample, **(f.counterexample.get("display") or {})}  # as printed
    if cex:
        inputs = "; ".join(f"{k} = {v}" for k, v in (cex.get("inputs") or {}).items())
        rows.append('<div><b>counterexample</b>' + (f' (inputs: <code>{_esc(inputs)}</code>)' if inputs else "")
                    + f'</div><pre>single-device {_esc(cex.get("tensor") or "")}{_esc(cex.get("index", ""))}:\n'
                    f'{_esc(cex.get("single_device"))}\nrank {_esc(cex.get("rank"))} holds:\n'
                    f'{_esc(cex.get("distributed"))}</pre>')
    if f.hint:
        rows.append(f'<div class="hint"><b>hint</b> {_esc(f.hint)}</div>')
    return f'<section class="finding-box" id="finding-{i}">' + "".join(rows) + "</section>"


def _table(head: list[str], rows: list[list]) -> str:
    return ("<table><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows) + "</table>")


def _goto(report: Report, f: Finding) -> str | None:
    """``column:node`` of the first finding's node on its first rank, in the page's columns."""
    ranks = report.graphs[1:]
    for c, group in enumerate(rank_groups(ranks), 1):
        g = ranks[group[0]] if any(ranks[i].label == f"rank {f.rank[0]}" for i in group) else None
        if g is not None:
            i = next((i for i, n in enumerate(g.nodes) if n.name == f.node), None)
            return None if i is None else f"{c}:{i}"
    return None


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page."""
    title = f"shardproof: {report.status} — {report.name or 'case'}"
    verdict = report.status.upper() + (f" ({report.strength})" if report.strength else "")
    seconds = report.stats.get("seconds")
    head = (f'<header><h1><span class="verdict-{report.status}">{_esc(verdict)}</span> '
            f'{_esc(report.name or "case")} at world size {report.world_size}</h1>'
            + (f'<div>{seconds:.2f} s, {report.stats.get("nodes_seq", 0)} single-device and '
               f'{report.stats.get("nodes_dist", 0)} distributed nodes</div>' if seconds is not None else "")
            + (f'<div class="reason">{_esc(report.reason)}</div>' if report.reason else "")
            + (f'<div class="confirmation confirmation-{report.confirmation.outcome}">'
               f'{_esc(report.confirmation.describe())}</div>' if report.confirmation else "") + "</header>")
    body = ["<h2>outputs</h2>", _table(["output", "expected", "proved"],
                                       [[o.name, o.expected, o.holds or "not proved"] for o in report.outputs])]
    body += [_finding_html(i, f, _goto(report, f)) for i, f in enumerate(report.findings, 1)]
    finding = report.findings[0] if report.findings else None
    data = graph_data(report.graphs, finding) if report.graphs else {"s": [], "cols": []}
    if report.graphs:
        legend = "".join(f'<span><i class="sw s-{s}" style="background:{c}"></i>{_esc(STATUS_TEXT[s])}</span>'
                         for s, c in zip(STATUSES, ("#e3f4e8", "#fde3e3", "#fff4d6", "#eeeeee", "#f6f7f9")))
        legend += ('<span><i class="sw mismatch"></i>shape differs from the single-device tensor\'s</span>'
                   '<span><b style="color:#6a4fb0">f32[4, 1]</b> a shard of the single-device shape</span>')
        ranks = sorted(r for col in data["cols"] for r in col["ranks"] if r is not None)
        chooser = ""
        if len(data["cols"]) - 1 < len(ranks):  # some ranks share a column
            chooser = ('<label>show <select id="rank-choice"><option value="">every rank column</option>'
                       + "".join(f'<option value="{r}">rank {r} beside the single device</option>' for r in ranks)
                       + "</select></label>")
        body += ['<h2>graphs</h2><div class="legend">' + legend + "</div>",
                 "<p>Each node shows its shape and its relation to the single-device program; hover for all of "
                 "it, click for the details, its inputs, the same tensor on the other ranks and the single-device "
                 "tensor it relates to. ⇥ marks outputs. Ranks whose graphs are identical up to rank constants "
                 "share a column.</p>" + chooser,
                 '<div id="graphs"></div>']
    if report.relations:
        body += ["<details><summary>input relations</summary>",
                 _table(["distributed input", "relation", "of single-device", "how"],
                        [[k, r["relation"], r["of"], r["how"]] for k, r in report.relations.items()]), "</details>"]
    body.append("<h2>assumptions</h2><ul>" + "".join(f"<li>{_esc(a)}</li>" for a in report.assumptions) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{CSS}</style><script>{ERRORS_JS}</script></head>"
            f"<body>{head}<div id=\"layout\"><main>{''.join(body)}</main><div id=\"details\"></div>"
            "<pre id=\"selfcheck\"></pre><pre id=\"errors\"></pre></div>"
            f"<script type=\"application/json\" id=\"graph-data\">{dumps_for_script(data)}</script>"
            f"<script>{JS}</script></body></html>\n")
