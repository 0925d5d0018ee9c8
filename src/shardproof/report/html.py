"""The HTML report: one self-contained page (inline CSS, JS and SVG; nothing fetched) with
the verdict, the findings, and the single-device graph beside each rank's graph.

Each graph is drawn as a column of its nodes in dataflow order, with its edges as arcs on
the left: readable for the few hundred nodes of a transformer layer, and laid out in linear
time. Nodes are coloured by their relation status (related / violated / unknown /
unreached; single-device nodes no rank holds are 'unmatched'); the first finding's node is
outlined. Hovering a node shows its relation; clicking it shows the details and highlights
its inputs, the same tensor on the other ranks, and the single-device tensor it relates to.
Opening ``report.html#finding`` selects the first finding's node. The report needs
``report.graphs`` (verify with ``views=True``); without it the page shows the verdict and
findings only.
"""
from __future__ import annotations

import html
import json
import math
import os
import re
from urllib.parse import quote

from ..engine.result import Finding, GraphView, Report

ROW = 22  # px per node row
BOX_W, BOX_H = 330, 18
ARC_W = 90  # room on the left of the boxes for edge arcs
TOP = 6
LABEL_CHARS = 50
STATUSES = ("related", "violated", "unknown", "unreached", "unmatched")
STATUS_TEXT = {"related": "related to the single-device program", "violated": "the first finding (violated)",
               "unknown": "no relation found", "unreached": "not reached",
               "unmatched": "single-device tensor no rank holds"}

CSS = """
body{font:13px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
header{padding:12px 18px;border-bottom:1px solid #dde2ea;background:#fff}
h1{font-size:18px;margin:0 0 4px}
h2{font-size:14px;margin:14px 0 6px}
.verdict-verified{color:#1b7f3b}.verdict-violation{color:#c62828}.verdict-unknown{color:#a86f00}
main{padding:0 18px 18px}
table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid #dde2ea;padding:2px 8px;text-align:left}
.finding-box{border-left:4px solid #c62828;background:#fff;padding:8px 12px;margin:8px 0}
.finding pre{background:#f4f6f9;padding:6px;margin:4px 0;overflow-x:auto}
.hint{color:#0b6b88}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:12px;height:12px;border:1px solid #888;vertical-align:-2px;margin-right:4px}
#graphs{display:flex;gap:10px;overflow-x:auto;align-items:flex-start;border:1px solid #dde2ea;background:#fff;
  max-height:78vh;overflow-y:auto}
.graph{flex:0 0 auto}
.graph h3{position:sticky;top:0;margin:0;padding:4px 8px;background:#eef1f6;font-size:13px;z-index:1}
svg text{font:11px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;pointer-events:none}
.node rect{stroke:#9aa3b2;stroke-width:1;cursor:pointer}
.s-related rect{fill:#e3f4e8;stroke:#4f9a65}
.s-violated rect{fill:#fde3e3;stroke:#c62828;stroke-width:2}
.s-unknown rect{fill:#fff4d6;stroke:#c99a06}
.s-unreached rect{fill:#eeeeee;stroke:#b0b0b0}
.s-unmatched rect{fill:#f6f7f9;stroke:#c3c9d4;stroke-dasharray:3 2}
.node.finding rect{stroke:#b00020;stroke-width:3.5}
.node.out text{font-weight:bold}
.node.sel rect{stroke:#1f4fd6;stroke-width:3}
.node.peer rect{stroke:#7a3fd1;stroke-width:3}
.edge{fill:none;stroke:#b7bfcc;stroke-width:1}
.edge.hl{stroke:#1f4fd6;stroke-width:2}
#details{position:fixed;right:12px;bottom:12px;width:420px;max-height:40vh;overflow:auto;background:#fff;
  border:1px solid #aab3c2;box-shadow:0 2px 10px rgba(0,0,0,.15);padding:8px 12px;display:none}
#details h4{margin:0 0 4px}
#details pre{white-space:pre-wrap}
#selfcheck,#errors{display:none}
"""

JS = r"""
(function(){
  var data = JSON.parse(document.getElementById('graph-data').textContent);
  var nodes = document.querySelectorAll('.node');
  var byName = data.graphs.map(function(g){var m={};g.nodes.forEach(function(n,i){m[n.name]=i;});return m;});
  function el(g,i){return document.getElementById('g'+g+'n'+i);}
  function clear(){
    document.querySelectorAll('.sel,.peer,.hl').forEach(function(e){e.classList.remove('sel','peer','hl');});
  }
  function esc(s){return String(s).replace(/[&<>"]/g,function(c){return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c];});}
  function select(g,i,scroll){
    clear();
    var n = data.graphs[g].nodes[i], e = el(g,i);
    e.classList.add('sel');
    document.querySelectorAll('.edge[data-g="'+g+'"][data-to="'+i+'"]').forEach(function(p){p.classList.add('hl');});
    data.graphs.forEach(function(other,h){
      if(h===g) return;
      if(g>0 && h>0 && n.name in byName[h]) el(h,byName[h][n.name]).classList.add('peer');
      if(g>0 && h===0 && n.of && n.of in byName[0]) el(0,byName[0][n.of]).classList.add('peer');
      if(g===0 && h>0) other.nodes.forEach(function(m,j){if(m.of===n.name) el(h,j).classList.add('peer');});
    });
    var src = n.source ? (n.href ? '<a href="'+esc(n.href)+'">'+esc(n.source)+'</a>' : esc(n.source)) : 'unknown';
    var d = document.getElementById('details');
    d.innerHTML = '<h4>'+esc(data.graphs[g].label)+': '+esc(n.name)+'</h4>'+
      '<div><b>op</b> <code>'+esc(n.op)+'</code> '+esc(n.shape)+'</div>'+
      '<div><b>status</b> '+esc(n.status)+'</div><div><b>relation</b> '+esc(n.relation)+'</div>'+
      '<div><b>inputs</b> '+esc(n.inputs.join(', ')||'none')+'</div><div><b>source</b> '+src+'</div>'+
      (n.code ? '<pre>'+esc(n.code)+'</pre>' : '');
    d.style.display = 'block';
    if(scroll) e.scrollIntoView({block:'center', inline:'center'});
  }
  nodes.forEach(function(e){
    e.addEventListener('click', function(){select(+e.dataset.g, +e.dataset.i, false);});
  });
  document.querySelectorAll('[data-goto]').forEach(function(a){
    a.addEventListener('click', function(ev){
      ev.preventDefault();
      var p = a.dataset.goto.split(':');
      select(+p[0], +p[1], true);
    });
  });
  // report.html#finding opens with the first finding's node selected
  var first = document.querySelector('[data-goto]');
  if(location.hash === '#finding' && first){ var q = first.dataset.goto.split(':'); select(+q[0], +q[1], true); }
  var counts = {};
  nodes.forEach(function(e){var s=e.getAttribute('class').match(/s-(\w+)/)[1]; counts[s]=(counts[s]||0)+1;});
  document.getElementById('selfcheck').textContent = JSON.stringify({
    graphs: document.querySelectorAll('.graph svg').length, nodes: nodes.length, counts: counts,
    finding: document.querySelectorAll('.node.finding').length});
  document.body.setAttribute('data-ready', '1');
})();
"""

ERRORS_JS = """window.addEventListener('error', function(e){
  var p = document.getElementById('errors'); if(p) p.textContent += (e.message || 'error') + '\\n';
});"""


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def source_href(source: str | None) -> str | None:
    """A file:// link to the file of a ``path:line[ in fn]`` source location."""
    m = re.match(r"^(.+?):(\d+)(?: in .*)?$", source or "")
    if not m:
        return None
    return "file://" + quote(os.path.abspath(m.group(1))) + f"#L{m.group(2)}"


def _source(source: str | None) -> str:
    href = source_href(source)
    if source is None:
        return "unknown"
    return f'<a href="{_esc(href)}">{_esc(source)}</a>' if href else _esc(source)


def _label(n) -> str:
    text = f"{n.name} = {n.op}"
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def _graph_svg(gi: int, graph: GraphView, finding: Finding | None) -> str:
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    outputs = set(graph.outputs)
    width = ARC_W + BOX_W + 8
    height = TOP * 2 + ROW * len(graph.nodes)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}">']
    cy = [TOP + i * ROW + BOX_H / 2 for i in range(len(graph.nodes))]
    for i, n in enumerate(graph.nodes):
        for name in dict.fromkeys(n.inputs):
            j = index.get(name)
            if j is None or j >= i:
                continue
            bulge = min(ARC_W - 6, 6 + 6 * math.sqrt(i - j))
            x = ARC_W
            parts.append(f'<path class="edge" data-g="{gi}" data-to="{i}" d="M{x},{cy[j]:.0f} C{x - bulge:.0f},'
                         f'{cy[j]:.0f} {x - bulge:.0f},{cy[i]:.0f} {x},{cy[i]:.0f}"/>')
    rank = int(graph.label.split()[-1]) if graph.label.startswith("rank ") else None
    for i, n in enumerate(graph.nodes):
        classes = ["node", f"s-{n.status}"]
        if finding is not None and n.name == finding.node and rank in finding.rank:
            classes.append("finding")
        if n.name in outputs:
            classes.append("out")
        tip = "\n".join(x for x in (f"{n.name} = {n.op} {n.shape}", f"status: {n.status}", n.relation,
                                    f"at {n.source}" if n.source else "") if x)
        y = TOP + i * ROW
        parts.append(f'<g class="{" ".join(classes)}" id="g{gi}n{i}" data-g="{gi}" data-i="{i}">'
                     f'<title>{_esc(tip)}</title>'
                     f'<rect x="{ARC_W}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="3"/>'
                     f'<text x="{ARC_W + 5}" y="{y + 13}">{_esc(_label(n))}{" ⇥" if n.name in outputs else ""}'
                     f'</text></g>')
    parts.append("</svg>")
    return "".join(parts)


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
    for gi, g in enumerate(report.graphs):
        if g.label == f"rank {f.rank[0]}":
            i = next((i for i, n in enumerate(g.nodes) if n.name == f.node), None)
            return None if i is None else f"{gi}:{i}"
    return None


def _graph_data(report: Report) -> str:
    graphs = [{"label": g.label, "nodes": [{"name": n.name, "op": n.op, "shape": n.shape, "status": n.status,
                                            "relation": n.relation, "inputs": n.inputs, "source": n.source,
                                            "href": source_href(n.source), "code": n.code, "of": n.of}
                                           for n in g.nodes]} for g in report.graphs]
    # inside <script>, "</" would end the element: JSON allows the escaped form
    return json.dumps({"graphs": graphs}).replace("</", "<\\/")


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
    if report.graphs:
        legend = "".join(f'<span><i class="sw s-{s}" style="background:{c}"></i>{_esc(STATUS_TEXT[s])}</span>'
                         for s, c in zip(STATUSES, ("#e3f4e8", "#fde3e3", "#fff4d6", "#eeeeee", "#f6f7f9")))
        body += ['<h2>graphs</h2><div class="legend">' + legend + "</div>",
                 "<p>Hover a node for its relation; click it to see its inputs, the same tensor on the other "
                 "ranks and the single-device tensor it relates to. ⇥ marks outputs.</p>",
                 '<div id="graphs">' + "".join(
                     f'<div class="graph" data-label="{_esc(g.label)}"><h3>{_esc(g.label)} '
                     f'({len(g.nodes)} nodes)</h3>{_graph_svg(gi, g, finding)}</div>'
                     for gi, g in enumerate(report.graphs)) + "</div>"]
    if report.relations:
        body += ["<details><summary>input relations</summary>",
                 _table(["distributed input", "relation", "of single-device", "how"],
                        [[k, r["relation"], r["of"], r["how"]] for k, r in report.relations.items()]), "</details>"]
    body.append("<h2>assumptions</h2><ul>" + "".join(f"<li>{_esc(a)}</li>" for a in report.assumptions) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{CSS}</style><script>{ERRORS_JS}</script></head>"
            f"<body>{head}<main>{''.join(body)}</main><div id=\"details\"></div>"
            "<pre id=\"selfcheck\"></pre><pre id=\"errors\"></pre>"
            f"<script type=\"application/json\" id=\"graph-data\">{_graph_data(report)}</script>"
            f"<script>{JS}</script></body></html>\n")
