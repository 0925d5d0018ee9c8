"""Ops of a dump that have no rule, decomposed by re-tracing them over fake tensors.

Live capture decomposes an op without a rule through torch's core-ATen decomposition table
(:mod:`shardproof.frontends.torch_decomp`). A dump is text: its ops were recorded by someone
else's tracer. Each node whose op has no rule, but has a decomposition in that table, is
re-traced alone: ``make_fx`` calls the op on fake tensors of the node's input types (no
values exist, nothing of the dump is executed, and the dump's Python is never run), and the
ATen graph that comes out replaces the node. The replacement nodes keep the node's source
and origin (the dump's file and line), and are named ``<node>.<inner node>``.

A node is left as it is (so the verdict names it as unknown, as before) when torch is not
installed, when its op has no decomposition, or when the re-trace fails (an argument that
is not a tensor of known type, a data-dependent op). Multi-output ops are re-traced too:
the dump's ``getitem(node, i)`` then reads output ``i`` of the decomposed graph.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, TensorType
from ..ops.registry import REGISTRY, load_builtin

_SKIP = {"input", "constant", "getitem", "output"}


def _torch_dtype(torch, short: str):
    from .torch_capture import DTYPES
    for dt, name in DTYPES.items():
        if name == short:
            return dt
    raise ValueError(short)


def _packet(torch, op: str):
    ns, _, name = op.partition(".")
    if ns != "aten" or not name:
        return None
    return getattr(torch.ops.aten, name, None)


def _decomposable(packet, table) -> bool:
    return any(getattr(packet, o, None) in table for o in packet.overloads())


def _remap(value, env: dict):
    if isinstance(value, Node):
        return env.get(value, value)
    if isinstance(value, list):
        return [_remap(v, env) for v in value]
    if isinstance(value, tuple):
        return tuple(_remap(v, env) for v in value)
    return value


def _placeholders(value, found: list):
    """Nodes in an argument structure, replaced by their position among the tensor inputs."""
    if isinstance(value, Node):
        if not isinstance(value.type, TensorType):
            raise ValueError(f"argument {value.name} is not a tensor of known type")
        found.append(value)
        return ("__input__", len(found) - 1)
    if isinstance(value, (list, tuple)):
        return type(value)(_placeholders(v, found) for v in value)
    return value


def _fill(value, tensors):
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__input__":
        return tensors[value[1]]
    if isinstance(value, (list, tuple)):
        return type(value)(_fill(v, tensors) for v in value)
    return value


def _retrace(node: Node, table: dict):
    """(nodes, outputs) of `node`'s op decomposed, or None. `outputs` is the list of IR nodes
    (one per output); the returned nodes' inputs are `node`'s own argument nodes."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from .torch_capture import from_fx

    packet = _packet(torch, node.op)
    if packet is None or not _decomposable(packet, table):
        return None
    inputs: list[Node] = []
    args = _placeholders(node.args, inputs)
    kwargs = {k: _placeholders(v, inputs) for k, v in node.kwargs.items()}
    for k, v in list(kwargs.items()):
        if k == "dtype" and isinstance(v, str):
            kwargs[k] = _torch_dtype(torch, v)

    def call(*tensors):
        out = packet(*_fill(args, tensors), **{k: _fill(v, tensors) for k, v in kwargs.items()})
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fakes = [torch.empty(n.type.shape, dtype=_torch_dtype(torch, n.type.dtype)) for n in inputs]
    with mode:
        gm = make_fx(call, decomposition_table=table)(*fakes)
    names = [f"{node.name}.in{i}" for i in range(len(inputs))]
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    multi = isinstance(node.type, tuple)
    sub = from_fx(gm.graph, names, [f"out{i}" for i in range(len(outs))], label=node.name)
    env = {}
    nodes = []
    for i, n in enumerate(n for n in sub.nodes if n.op == "input"):
        env[n] = inputs[i]
    for n in sub.nodes:
        if n.op == "input":
            continue
        n.name = f"{node.name}.{n.name}"
        n.args, n.kwargs = _remap(n.args, env), {k: _remap(v, env) for k, v in n.kwargs.items()}
        n.source, n.origin = node.source, node.origin
        nodes.append(n)
    results = [env.get(sub.outputs[f"out{i}"], sub.outputs[f"out{i}"]) for i in range(len(outs))]
    if not multi and len(results) != 1:
        return None
    return nodes, results, multi


def decompose_unruled(graph: Graph) -> Graph:
    """`graph` with every node whose op has no rule but a torch decomposition replaced by
    that decomposition (in place; returns the graph). See the module docstring."""
    load_builtin()
    todo = [n for n in graph.nodes if n.op not in _SKIP and n.op not in REGISTRY]
    if not todo:
        return graph
    try:
        import torch  # noqa: F401
    except ImportError:
        return graph
    from .torch_decomp import capture_decompositions
    table = capture_decompositions()
    env: dict = {}
    multi: dict = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        node.args = _remap(node.args, env)
        node.kwargs = {k: _remap(v, env) for k, v in node.kwargs.items()}
        if node.op == "getitem" and node.args and node.args[0] in multi:
            env[node] = multi[node.args[0]][node.args[1]]
            continue
        done = None
        if node.op not in _SKIP and node.op not in REGISTRY:
            try:
                done = _retrace(node, table)
            except Exception:  # noqa: BLE001  (an op that cannot be re-traced stays; its verdict is unknown)
                done = None
        if done is None:
            nodes.append(node)
            continue
        new, results, is_multi = done
        nodes.extend(new)
        if is_multi:
            multi[node] = results
        else:
            env[node] = results[0]
    graph.nodes = nodes
    graph.outputs = {k: _remap(v, env) for k, v in graph.outputs.items()}
    return graph
