"""Per-node relation data for the graph views of a report (the HTML page draws them): every
node of the single-device program and of each rank, with its relation status and a one-line
description of what it holds. Built from what verification already computed; no I/O."""
from __future__ import annotations

import numpy as np

from ..algebra.layout import Val
from ..ir.graph import DistributedProgram, Graph, Node
from .result import Finding, GraphView, NodeView
from .status import summarize


def _span(p, size: int) -> str:
    if p is None:
        return ":"
    if len(p) and np.array_equal(p, np.arange(p[0], p[0] + len(p))):
        return f"{p[0]}:{p[0] + len(p)}" if len(p) > 1 else str(p[0])
    return f"<{len(p)} of {size}>"


def _held_text(rel) -> str:
    """What a rank holds of a single-device tensor: ``x[0:4, :]``, or ``x`` when all of it."""
    seq = rel.seq_node
    if rel.positions is None or all(p is None for p in rel.positions):
        return seq.name
    shape = seq.shape if seq.type is not None and not isinstance(seq.type, tuple) else [0] * len(rel.positions)
    return f"{seq.name}[{', '.join(_span(p, s) for p, s in zip(rel.positions, shape))}]"


def _describe(rel) -> str:
    if rel.kind == "held":
        return f"holds {_held_text(rel)}"
    if rel.kind == "partial":
        return f'Partial("{rel.partial}") of {rel.seq_node.name}: the ranks\' values combine to it'
    if rel.kind == "scaled":
        return f"exactly {rel.factor} times {_held_text(rel)}"
    return {"view": f"a view of {rel.seq_node.name}", "const": "a constant (depends on no input)",
            "input": "an input with no single-device counterpart", "piece": f"a piece of {rel.seq_node.name}",
            "softmax-state": f"a partial online-softmax {rel.factor} of {rel.seq_node.name}",
            "local": "a rank-local index or piece",
            "packed": f"a concatenation of tensors (one of them {rel.seq_node.name})"}[rel.kind]


def _across_ranks(name: str, dist: DistributedProgram, status: list, by_name: list[dict]) -> str:
    """The relation the ranks' pieces of tensor `name` form together (Shard, Replicate, ...);
    `by_name` maps each rank's node names to its nodes."""
    rels = [status[r].get(nodes[name]) if name in nodes else None for r, nodes in enumerate(by_name)]
    if any(rel is None or rel.kind != "held" or rel.positions is None for rel in rels):
        return ""
    seq = rels[0].seq_node
    if any(rel.seq_node is not seq for rel in rels) or seq.type is None or isinstance(seq.type, tuple):
        return ""
    return f"{summarize([rel.positions for rel in rels], tuple(seq.shape), dist.world_size)} of {seq.name}"


def _shape(node: Node) -> str:
    if node.type is None:
        return ""
    if isinstance(node.type, tuple):
        return "(" + ", ".join(str(t) for t in node.type if t is not None) + ")"
    return str(node.type)


def _node_view(node: Node, status: str, relation: str, of: str | None = None) -> NodeView:
    return NodeView(node.name, node.op, [x.name for x in node.inputs], _shape(node), status, relation,
                    str(node.source) if node.source else None, node.source.code if node.source else "", of)


def _rank_status(node: Node, env: dict, rel, parts: list, finding: Finding | None, rank: int) -> tuple[str, str]:
    """(status, description) of one node of a rank; `parts` are the relations of its outputs
    when it is a multi-output op."""
    if finding is not None and node.name == finding.node and rank in finding.rank:
        return "violated", f"the first finding ({finding.kind}): expected {finding.expected}; " + (
            _describe(rel) if rel else f"holds {finding.actual}")
    if node not in env:
        return "unreached", "not interpreted: verification stopped before this node"
    value = env[node]
    if isinstance(value, Val):
        if rel is None:
            return "unknown", "related to no single-device tensor"
        return "related", _describe(rel)
    if isinstance(value, tuple):  # a multi-output op: related when its tensor outputs are
        if any(p is None for p in parts):
            return "unknown", "some outputs are related to no single-device tensor"
        return "related", "its outputs: " + ("; ".join(_describe(p) for p in parts) or "not used")
    return "related", "not a tensor (a size, a scalar or a flag)"


def graph_views(run, seq: Graph, dist: DistributedProgram, status: list, findings: list[Finding]) -> list[GraphView]:
    """The single-device graph, then each rank's, with every node's relation status:
    related / violated (the first finding) / unknown (no relation) / unreached, and for
    single-device nodes which ranks' tensors hold them."""
    finding = findings[0] if findings else None
    holders: dict[str, list[str]] = {}
    views = []
    by_name = [{n.name: n for n in g.nodes} for g in dist.graphs]
    across: dict[str, str] = {}  # the same for every rank: computed once per name
    for r, g in enumerate(dist.graphs):
        outputs_of: dict[Node, list] = {}
        for n in g.nodes:
            if n.op == "getitem" and n in status[r] and n.args and isinstance(n.args[0], Node):
                outputs_of.setdefault(n.args[0], []).append(status[r][n])
        nodes = []
        for n in g.nodes:
            rel = status[r].get(n)
            state, text = _rank_status(n, run.dist[r], rel, outputs_of.get(n, []), finding, r)
            of = rel.seq_node.name if rel is not None and rel.kind in ("held", "partial", "view") else None
            if state == "violated" and of is None:
                of = finding.counterpart
            if rel is not None and rel.kind in ("held", "partial"):
                holders.setdefault(of, []).append(f"rank {r}: {n.name}" + (" (a partial sum)" if rel.partial else ""))
                if n.name not in across:
                    across[n.name] = _across_ranks(n.name, dist, status, by_name)
                together = across[n.name]
                text += f" (across ranks: {together})" if together else ""
            nodes.append(_node_view(n, state, text, of))
        views.append(GraphView(f"rank {r}", nodes, [o.name for o in g.outputs.values()]))
    counterpart = finding.counterpart if finding is not None else None
    seq_nodes = []
    for n in seq.nodes:
        held_by = holders.get(n.name, [])
        if n.name == counterpart:
            state = "violated"
        else:
            state = "related" if held_by else "unmatched"
        text = ("held by " + ", ".join(held_by[:6]) + (f" and {len(held_by) - 6} more" if len(held_by) > 6 else "")
                if held_by else "no distributed tensor holds it (an intermediate the ranks compute differently)")
        if state == "violated":
            text = f"the single-device tensor of the first finding; {text}"
        seq_nodes.append(_node_view(n, state, text))
    return [GraphView("single-device", seq_nodes, [o.name for o in seq.outputs.values()])] + views
