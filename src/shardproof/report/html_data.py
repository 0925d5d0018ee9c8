"""The graph data the HTML page draws, made small: one string table for every name, op,
shape, relation, source line and code line; ranks whose graphs are identical up to rank
constants collapsed into one column, their per-rank relation texts kept as one template
with the numbers that differ; node references as indices. No I/O."""
from __future__ import annotations

import json
import os
import re
from urllib.parse import quote

from ..engine.result import Finding, GraphView, NodeView

STATUS_CODES = ("related", "violated", "unknown", "unreached", "unmatched")
COLLAPSE_FROM = 3  # from this many ranks, ranks with identical graphs share a column
HOLE = "\u0001"  # a number that differs between the ranks of a column
NUMBER = re.compile(r"(\d+)")
SHAPE = re.compile(r"\[([\d, ]*)\]")
EXPECTED = re.compile(r"expected (Shard\((\d+)\)|Replicate\(\)|Partial)")


def source_href(source: str | None) -> str | None:
    """A file:// link to the file of a ``path:line[ in fn]`` source location."""
    m = re.match(r"^(.+?):(\d+)(?: in .*)?$", source or "")
    if not m:
        return None
    return "file://" + quote(os.path.abspath(m.group(1))) + f"#L{m.group(2)}"


def rank_label(ranks: list[int]) -> str:
    """``rank 3``, or ``ranks 0–7 (identical)`` / ``ranks 0–2, 4–7 (identical)``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    text = ", ".join(f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs)
    return f"ranks {text} (identical)"


def _rank(graph: GraphView) -> int | None:
    return int(graph.label.split()[-1]) if graph.label.startswith("rank ") else None


def _signature(graph: GraphView) -> tuple:
    """What must agree for two ranks to share a column: everything but the rank constants
    in the relation texts."""
    return tuple((n.name, n.op, tuple(n.inputs), n.shape, n.status, n.of, n.source,
                  tuple(NUMBER.split(n.relation)[::2])) for n in graph.nodes)


def rank_groups(ranks: list[GraphView]) -> list[list[int]]:
    """Positions in `ranks` grouped into columns: each rank alone below COLLAPSE_FROM ranks,
    else the ranks with equal signatures together (in rank order of their first member)."""
    if len(ranks) < COLLAPSE_FROM:
        return [[i] for i in range(len(ranks))]
    groups: dict[tuple, list[int]] = {}
    for i, g in enumerate(ranks):
        groups.setdefault(_signature(g), []).append(i)
    return list(groups.values())


def _dims(shape: str) -> list[int] | None:
    m = SHAPE.search(shape or "")
    if m is None or "(" in (shape or ""):
        return None
    return [int(x) for x in m.group(1).split(",") if x.strip()]


def _explained(mine: list[int], theirs: list[int], relation: str) -> bool:
    """Whether a rank's shape `mine` fits the single-device `theirs` under the relation the
    finding expected (``expected Shard(d)`` / ``Replicate()`` / ``Partial``), or, with none,
    as an even split of one dimension."""
    if len(mine) != len(theirs):
        return False
    diff = [d for d, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    expected = EXPECTED.search(relation)
    if expected is not None and expected.group(2) is None:
        return not diff  # Replicate() and Partial keep the shape
    if expected is not None and [int(expected.group(2))] != diff:
        return False
    return len(diff) == 1 and 0 < mine[diff[0]] < theirs[diff[0]] and theirs[diff[0]] % mine[diff[0]] == 0


def shape_check(node: NodeView, counterpart: NodeView | None) -> int:
    """0: the same shape as the single-device counterpart (or nothing to compare); 1: differs
    as a relation explains (a shard of it); 2: differs where nothing does -- the finding's
    node, or a node with no relation, whose shape is no even split of the counterpart's (or,
    for the finding's, not the split its expected relation implies)."""
    if counterpart is None:
        return 0
    mine, theirs = _dims(node.shape), _dims(counterpart.shape)
    if mine is None or theirs is None or mine == theirs:
        return 0
    if node.status == "related":
        return 1  # proved related: the relation maps its elements, whatever the shape
    if len(mine) != len(theirs) and node.status != "violated":
        return 0  # another tensor that happens to share the name
    return 1 if _explained(mine, theirs, node.relation) else 2


def _counterpart(node: NodeView, of: int, seq: GraphView | None, seq_index: dict) -> int:
    """The single-device node whose shape `node`'s is compared with: for a node with no
    relation or the finding's, the same-named one of the same op; else the one it holds
    (not one it is only a view of); -1 for none."""
    same = seq_index.get(node.name, -1)
    if node.status in ("violated", "unknown") and same >= 0 and seq.nodes[same].op == node.op:
        return same
    return -1 if node.relation.split("; ")[-1].startswith(("a view", "a piece", "a concat")) else of


class _Strings:
    def __init__(self):
        self.items: list[str] = []
        self.index: dict[str, int] = {}

    def __call__(self, text: str | None) -> int:
        text = text or ""
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.items)
            self.items.append(text)
        return i


def _relations(s: _Strings, members: list[GraphView], i: int) -> tuple[int, list[str] | None]:
    """The relation of node `i` for a column of `members` ranks: one string, or a template
    with HOLEs and, per rank, the numbers that fill them (comma-separated)."""
    texts = [g.nodes[i].relation for g in members]
    if len(set(texts)) == 1:
        return s(texts[0]), None
    parts = [NUMBER.split(t) for t in texts]
    numbers = [p[1::2] for p in parts]
    holes = [k for k in range(len(numbers[0])) if len({ns[k] for ns in numbers}) > 1]
    template = parts[0][:]
    for k in holes:
        template[2 * k + 1] = HOLE
    return s("".join(template)), [",".join(ns[k] for k in holes) for ns in numbers]


def _column(s: _Strings, label: str, members: list[GraphView], ranks: list[int | None], seq: GraphView | None,
            finding: Finding | None) -> dict:
    """One column: the nodes of `members` (ranks with one signature; or the single-device
    graph, `seq` None) as parallel index arrays."""
    first = members[0]
    index = {n.name: i for i, n in enumerate(first.nodes)}
    seq_index = {n.name: i for i, n in enumerate(seq.nodes)} if seq is not None else {}
    col = {"label": label, "ranks": ranks, "n": len(first.nodes), "name": [], "op": [], "shape": [], "st": [],
           "rel": [], "src": [], "code": [], "of": [], "cmp": [], "sd": [], "in": [], "vary": {},
           "out": sorted(index[o] for o in first.outputs if o in index), "fin": []}
    for i, n in enumerate(first.nodes):
        for key, text in (("name", n.name), ("op", n.op), ("shape", n.shape), ("src", n.source), ("code", n.code)):
            col[key].append(s(text))
        col["st"].append(STATUS_CODES.index(n.status))
        rel, vary = _relations(s, members, i)
        col["rel"].append(rel)
        if vary is not None:
            col["vary"][str(i)] = vary
        of = seq_index.get(n.of, -1) if n.of else -1
        col["of"].append(of)
        cmp = _counterpart(n, of, seq, seq_index)
        col["cmp"].append(cmp)
        col["sd"].append(shape_check(n, seq.nodes[cmp] if cmp >= 0 else None))
        col["in"].append([index[x] for x in dict.fromkeys(n.inputs) if x in index and index[x] < i])
        if finding is not None and n.name == finding.node and any(r in finding.rank for r in ranks if r is not None):
            col["fin"].append(i)
    return col


def graph_data(graphs: list[GraphView], finding: Finding | None) -> dict:
    """The page's data: ``s`` (the string table), ``href`` (links of the source strings),
    ``cols`` (the single-device column, then one per group of identical ranks)."""
    s = _Strings()
    seq = graphs[0] if graphs and _rank(graphs[0]) is None else None
    ranks = [g for g in graphs if _rank(g) is not None]
    cols = []
    if seq is not None:
        cols.append(_column(s, seq.label, [seq], [None], None, None))
    for group in rank_groups(ranks):
        members = [ranks[i] for i in group]
        numbers = [_rank(g) for g in members]
        cols.append(_column(s, rank_label(numbers), members, numbers, seq, finding))
    sources = {i for col in cols for i in col["src"]}
    href = {str(i): h for i in sorted(sources) if (h := source_href(s.items[i])) is not None}
    return {"s": s.items, "href": href, "cols": cols}


def dumps_for_script(data: dict) -> str:
    """JSON for a ``<script type="application/json">`` element ("</" would end it)."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
