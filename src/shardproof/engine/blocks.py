"""Block contracts over a stack of layers (issue 16): identical blocks are proved once, and
the proved contracts are chained (torch-free, no I/O).

A block's *contract* is what the engine proved on the block's own program (its forward and
its backward, one graph per rank of its tensor-parallel group, and the single-device block):
given the input relations of the block's input ``x`` and of its output gradient ``g``, the
relations that hold of its output ``y``, of its input gradient ``grad_x`` and of every
parameter gradient. The relations in a contract are the ones the engine *proved* (each
output check's ``holds``), never the ones expected.

Two layers share a contract only if their programs are the same: on the single device and
on every rank they dispatch the same ATen ops on operands of the same shapes, dtypes,
strides and offsets, with the same constants and group names, and every input relates to the
single-device block by the same relation (so a layer whose weights are loaded from another
slice, or whose code differs in one op, is a class of its own and gets its own proof). The
key is computed by ``shardproof.blocks.screen_block``; :func:`structure_key` is the coarser
shape of a captured block at any size.

Why chaining is sound. Layer i computes ``y_i = B_i(y_{i-1})`` and, backward,
``(grad_x_i, grad_params_i) = vjp(B_i)(y_{i-1}, grad_x_{i+1})``. The contract of layer i's
class is a proof *for all values* of its inputs that satisfy its input relations R_x, R_g.
:func:`chain` requires, for every i > 0, that layer i's input relation of ``x`` is exactly the
relation proved of ``y`` by layer i-1's contract, and for every i < N-1, that layer i's
input relation of ``g`` is exactly the relation proved of ``grad_x`` by layer i+1's contract;
the first layer's ``x`` and the last layer's ``g`` take the relations the caller states of
the stack's input and output gradient. By induction over i (forward) and over N-1-i
(backward), every layer's inputs satisfy the relations its contract assumed, so every
conclusion of every contract holds of the stack: the output, the input gradient, and each
layer's parameter gradients. A contract that could not be proved (violation, unknown) is
not chained over: its verdict is the stack's, located at the first layer of its class.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from ..ir.graph import Graph, Node
from .next_step import for_unchained
from .result import Report

LINKS = {"x": "y", "g": "grad_x"}
"""A block's input -> the output of its neighbour that feeds it (x from the previous block's
y forward; g from the next block's grad_x backward)."""
FORWARD, BACKWARD = "x", "g"


def _canon(value, index: dict, sizes: bool = True):
    if isinstance(value, Node):
        return ("%", index[value.name])
    if isinstance(value, (list, tuple)):
        return tuple(_canon(v, index, sizes) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _canon(v, index, sizes)) for k, v in value.items()))
    if not sizes and isinstance(value, (int, float)) and not isinstance(value, bool):
        return "#"
    return repr(value)


def _type(t, sizes: bool = True):
    if isinstance(t, tuple):
        return tuple(_type(x, sizes) for x in t)
    if t is None:
        return None
    if not sizes:
        return getattr(t, "dtype", None)
    return (getattr(t, "shape", None), getattr(t, "dtype", None), getattr(t, "strides", None),
            getattr(t, "offset", None), repr(t))


def graph_text(graph: Graph, sizes: bool = True) -> str:
    """The graph as canonical text: node names replaced by positions (source lines left out:
    they say where, not what); inputs keep their names, outputs their names and nodes.
    Without `sizes`: the program's structure only (ops, dataflow, dtypes, non-numeric
    constants such as group names), shapes and numeric constants erased, and no events."""
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    rows = [repr((n.name if n.op == "input" else "", n.op, _canon(n.args, index, sizes),
                  _canon(n.kwargs, index, sizes), _type(n.type, sizes), tuple(map(repr, n.defects)) if sizes else ()))
            for n in graph.nodes]
    rows.append(repr(sorted((k, index[v.name]) for k, v in graph.outputs.items())))
    if not sizes:
        return "\n".join(rows)
    rows.append(repr(sorted((k, repr(v)) for k, v in graph.stated.items())))
    if graph.events is not None:  # the program order the temporal checks read (no storage ids)
        rows.append(repr([(e.kind, e.op, e.group, e.ranks, e.peer, e.tag, e.async_op, e.signature,
                           e.handle is not None) for e in graph.events.events]))
    return "\n".join(rows)


def structure_key(graphs: list[Graph]) -> str:
    """A hash of the graphs' structure at any size (:func:`graph_text` without sizes): two
    programs built by the same code at different model sizes share it."""
    return hashlib.sha256("\0".join(graph_text(g, sizes=False) for g in graphs).encode()).hexdigest()[:16]


@dataclass
class Contract:
    """One distinct block, proved once: the layers that share it, the relations it assumed
    of its inputs, and the relations the engine proved of its outputs (None: not proved)."""
    key: str
    layers: list[int]
    inputs: dict
    outputs: dict
    report: Report
    structure: str = ""  # structure_key of the block's graphs (its shape at any size)

    def to_json(self) -> dict:
        return {"key": self.key, "structure": self.structure, "layers": list(self.layers), "status": self.report.status,
                "inputs": dict(self.inputs), "outputs": dict(self.outputs)}


def contract_of(key: str, layers: list[int], inputs: dict, report: Report, structure: str = "") -> Contract:
    """The contract a report proved: each output's relation that holds (as the engine proved it)."""
    return Contract(key, list(layers), dict(inputs), {o.name: o.holds for o in report.outputs}, report, structure)


def chain(order: list[str], contracts: dict[str, Contract], stack_inputs: dict) -> list[tuple[int, str]]:
    """Check the links between neighbouring layers (see the module's docstring): per broken
    link, (layer, why). `order`: each layer's contract key; `stack_inputs`: the relations the
    caller states of the first layer's ``x`` and the last layer's ``g``."""
    problems = []
    n = len(order)
    for i, key in enumerate(order):
        c = contracts[key]
        feeds = {FORWARD: contracts[order[i - 1]].outputs.get(LINKS[FORWARD]) if i > 0 else stack_inputs.get(FORWARD),
                 BACKWARD: contracts[order[i + 1]].outputs.get(LINKS[BACKWARD]) if i < n - 1
                 else stack_inputs.get(BACKWARD)}
        for name, given in feeds.items():
            if given is None or str(given) != str(c.inputs.get(name)):
                problems.append((i, f"layer {i}'s contract assumes {name}: {c.inputs.get(name)}, but what feeds it "
                                    f"holds {given if given is not None else 'no proved relation'}"))
    return problems


def summary(count: int, contracts: list[Contract]) -> str:
    proved = sum(c.report.status in ("verified", "violation") or c.report.reason.startswith("proved")
                 for c in contracts)
    times = {1: "once"}.get(proved, f"{proved} times")
    return f"{count} blocks, {len(contracts)} distinct, proved {times}"


def combine(order: list[str], contracts: dict[str, Contract], stack_inputs: dict, name: str = "") -> Report:
    """The stack's report: the first layer whose contract is not proved gives the verdict
    (its findings carry the layer), else a broken link is unknown, else the weakest of the
    contracts' verdicts (verified only if every distinct block's proof was confirmed)."""
    distinct = sorted(contracts.values(), key=lambda c: c.layers[0])
    blocks = {"count": len(order), "distinct": len(distinct), "proofs": len(distinct),
              "summary": summary(len(order), distinct), "layers": [distinct.index(contracts[k]) for k in order],
              "contracts": [c.to_json() for c in distinct]}
    violating = next((c for c in distinct if c.report.status == "violation"), None)
    broken = [] if violating else chain(order, contracts, stack_inputs)
    bad = violating or next((c for c in distinct if c.report.status == "unknown"), None)
    base = bad or distinct[0]
    seconds = round(sum(c.report.stats.get("seconds", 0) for c in distinct), 4)
    report = replace(base.report, name=name or base.report.name, blocks=blocks,
                     findings=[replace(f, layer=base.layers[0]) for f in base.report.findings],
                     stats=dict(base.report.stats, seconds=seconds))
    where = f"layer {base.layers[0]}" + (f", and layers {', '.join(map(str, base.layers[1:]))} (the same block)"
                                         if len(base.layers) > 1 else "")
    if broken:
        report.status, report.strength = "unknown", None
        report.reason = "block contracts do not chain: " + "; ".join(why for _, why in broken[:3]) + f"; {for_unchained()}"
    elif bad is not None:
        report.reason = f"{bad.report.reason} ({where})" if bad.report.reason else where
    return report
