"""Local numeric evidence, for programs too large to evaluate end to end.

A real dump (a vocabulary of 100k entries times thousands of tokens) cannot be run in numpy,
but the first broken tensor can still be shown wrong *at its op*: the proof says which
single-device term every input of that op holds, so drawing one random value per term
gives inputs that agree between the programs exactly as the relations say. Evaluating
the op and its single-device counterpart on them is a counterexample to the tensor's
relation (the op's output is not the single-device output under any layout, or not under
the expected one). It is evidence about that tensor, not a run of the whole program:
the report says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..algebra.layout import Val, vec_array
from ..ir.graph import DistributedProgram, Graph, Node
from ..ops.registry import lookup, run_numerics
from ..relations.infer import relation_by_value
from ..relations.spec import Partial, Relation, held, layout_index
from .diagnose import counterpart_of, numbers
from .lockstep import is_collective, resolve
from .numeric import MAX_ELEMENTS

TOLERANCE = dict(rtol=1e-9, atol=1e-9)


@dataclass
class Evidence:
    """Values of the broken op on both sides (`inputs`: the single-device operands), or,
    when the tensors are too large to draw, one ready element-level counterexample."""
    inputs: dict = field(default_factory=dict)
    s_env: dict = field(default_factory=dict)
    d_envs: list = field(default_factory=list)
    counterexample: Optional[dict] = None


def _producer(node: Node) -> Node:
    return node.args[0] if node.op == "getitem" and node.args and isinstance(node.args[0], Node) else node


def _outputs(graph_nodes, producer: Node, value, env: dict) -> None:
    """Record a (multi-output) op's value and its getitems' values in `env`."""
    env[producer] = value
    if isinstance(value, tuple):
        for n in graph_nodes:
            if n.op == "getitem" and n.args[:1] == (producer,):
                env[n] = value[n.args[1]]


class _Draw:
    """Random values of every term, as a hash of (term, element): any selection of a
    term (on either side) reads the same values, and nothing larger than the selection
    is ever allocated."""

    def __init__(self, terms, seed: int):
        self.terms, self.seed, self.rng = terms, seed, np.random.default_rng(seed)

    def at(self, t: int, index: tuple, integer: bool) -> np.ndarray:
        """Values of term `t` at the (broadcastable) per-dim term index arrays `index`."""
        shape = self.terms.shape(t)
        flat = np.ravel_multi_index(np.broadcast_arrays(*index), shape) if shape else np.zeros((), np.int64)
        x = (np.asarray(flat, dtype=np.uint64) + np.uint64(t * 0x9E3779B1 + self.seed + 1)) * np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(31)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(29)
        return (x % np.uint64(2)).astype(np.int64) if integer else (x % np.uint64(19)).astype(np.float64) - 9

    def of(self, val: Val, dtype: str) -> np.ndarray:
        shape = self.terms.shape(val.t)
        local = [s if v is None else len(v) for s, v in zip(shape, val.vecs)]
        if int(np.prod(local, dtype=np.int64)) > MAX_ELEMENTS:
            raise OverflowError
        return self.at(val.t, layout_index(shape, val.vecs), dtype.startswith(("i", "u", "b")))

    def split(self, whole: np.ndarray, n: int) -> list[np.ndarray]:
        """n random pieces summing to `whole` (the ranks' values of a partial sum)."""
        parts = [self.rng.integers(-9, 10, size=whole.shape).astype(np.float64) for _ in range(n - 1)]
        return parts + [whole - sum(parts)]


def _args_env(node: Node, values: dict) -> Optional[dict]:
    """`values` plus the node's scalar constants; None if it reads anything else."""
    env = dict(values)
    for x in node.inputs:
        if x not in env:
            if x.op != "constant" or x.type is not None:
                return None
            env[x] = x.kwargs["value"]
    return env


def _evaluate(node: Node, env: dict):
    opdef = lookup(node.op)
    args = resolve(node.args, env)
    kwargs = {k: resolve(v, env) for k, v in node.kwargs.items()}
    with np.errstate(all="ignore"):
        return run_numerics(opdef, node, args, kwargs)


def _close(a, b) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, **TOLERANCE))


def contradicts(s_val, d_vals: list, expected: Optional[Relation]) -> bool:
    """Whether the ranks' values cannot be the single-device value under `expected`
    (None: under any layout or as a partial sum)."""
    s_val = np.asarray(s_val, dtype=np.float64)
    d_vals = [np.asarray(v, dtype=np.float64) for v in d_vals]
    if expected is None or isinstance(expected, Partial):
        if all(v.shape == s_val.shape for v in d_vals) and _close(np.sum(d_vals, 0), s_val):
            return False
        if isinstance(expected, Partial):
            return True
        return relation_by_value(np.round(s_val, 7) + 0.0, [np.round(v, 7) + 0.0 for v in d_vals]) is None
    world = len(d_vals)
    return not all(_close(v, held(s_val, expected.layout(s_val.shape, r, world))) for r, v in enumerate(d_vals))


def _elementwise_misaligned(run, draw: _Draw, producer: Node, counterpart: Node, rank: int) -> Optional[dict]:
    """An elementwise op whose operands, on `rank`, meet at element positions that never
    meet in the single-device program: one output element that combines them, next to
    the single-device element at the first operand's position (sizes do not matter:
    only the elements shown are drawn)."""
    from ..ops.common import elementwise_shape
    if lookup(producer.op).shape is not elementwise_shape or isinstance(producer.type, tuple):
        return None
    xs = [x for x in producer.inputs if isinstance(run.dist[rank].get(x), Val)]
    ys = [y for y in counterpart.inputs if isinstance(run.seq.get(y), Val)]
    if len(xs) != len(ys) or any(run.dist[rank][x].t != run.seq[y].t for x, y in zip(xs, ys)):
        return None
    terms, nd = run.terms, len(producer.shape)
    per_dim = []  # (ok, j): whether local index i meets as on a single device, and where
    for d in range(nd):
        carriers = []
        for x, y in zip(xs, ys):
            dv, sv = run.dist[rank][x], run.seq[y]
            k = d - (nd - len(dv.vecs))
            if k >= 0 and terms.shape(dv.t)[k] > 1:
                size = terms.shape(dv.t)[k]
                carriers.append((vec_array(dv.vecs[k], size), vec_array(sv.vecs[k], size)))
        if not carriers:
            per_dim.append((np.ones(1, bool), np.zeros(1, np.int64)))
            continue
        r0, s0 = carriers[0]
        if len(np.unique(s0)) != len(s0):
            return None
        where = np.full(int(max(s0.max(initial=0), r0.max(initial=0))) + 1, -1)
        where[s0] = np.arange(len(s0))
        j = where[r0]  # the single-device element at the first operand's position
        ok = j >= 0
        for rk, sk in carriers[1:]:
            ok &= sk[np.maximum(j, 0)] == rk
        per_dim.append((ok, j))
    bad = next((d for d, (ok, j) in enumerate(per_dim) if (~ok & (j >= 0)).any()), None)
    if bad is None or any(not (j >= 0).any() for _, j in per_dim):
        return None
    base = [int(np.argmax(j >= 0)) for _, j in per_dim]
    candidates = np.flatnonzero(~per_dim[bad][0] & (per_dim[bad][1] >= 0))[:32]

    def element(side_vals, node, index):
        """The op at one output element, from its operands' values there."""
        vals = {}
        for x, v in side_vals:
            ts, k0 = terms.shape(v.t), nd - len(v.vecs)
            idx = tuple(np.array([vec_array(v.vecs[k], ts[k])[index[k0 + k]] if ts[k] > 1 else 0])
                        for k in range(len(ts)))
            vals[x] = draw.at(v.t, idx, x.type.dtype.startswith(("i", "u", "b"))).reshape((1,) * len(ts))
        env = _args_env(node, vals)
        return None if env is None else (vals, _evaluate(node, env))
    for i in candidates:
        d_idx = base[:bad] + [int(i)] + base[bad + 1:]
        s_idx = [int(per_dim[d][1][k]) for d, k in enumerate(d_idx)]
        d_side = element([(x, run.dist[rank][x]) for x in xs], producer, d_idx)
        s_side = element([(y, run.seq[y]) for y in ys], counterpart, s_idx)
        if d_side is None or s_side is None:
            return None
        if not _close(d_side[1], s_side[1]):
            break
    else:
        return None
    fmt = lambda v: np.array2string(np.asarray(v, dtype=np.float64).reshape(-1), precision=6)  # noqa: E731
    at = lambda idx: "[" + ",".join(map(str, idx)) + "]"  # noqa: E731
    operands = [(f"{y.name}{at(s_idx)} (single-device)", v) for y, v in s_side[0].items()] \
        + [(f"{x.name}{at(d_idx)} (rank {rank})", v) for x, v in d_side[0].items()]
    flat = lambda v: numbers(np.asarray(v).reshape(-1))  # noqa: E731
    return {"index": at(s_idx), "rank": rank, "single_device": flat(s_side[1]), "distributed": flat(d_side[1]),
            "inputs": {k: flat(v) for k, v in operands},
            "display": {"inputs": {k: fmt(v) for k, v in operands}, "single_device": fmt(s_side[1]),
                        "distributed": fmt(d_side[1])},
            "text": f"rank {rank} {producer.name}{at(d_idx)} = {fmt(d_side[1])} combines its operands at positions "
                    f"that never meet on a single device (dim {bad}); single-device {counterpart.name}{at(s_idx)} "
                    f"= {fmt(s_side[1])}"}


def local_instance(run, seq: Graph, dist: DistributedProgram, node: Node, ranks: list[int], status: list[dict],
                   expected: Optional[Relation] = None, seed: int = 0):
    """Inputs and values of `node`'s op on every rank and of its single-device counterpart,
    drawn so that corresponding inputs agree; returns (inputs, single-device env, rank
    envs) when they contradict the expected relation, else None (no local evidence)."""
    producer = _producer(node)
    if producer.op in ("input", "constant") or lookup(producer.op) is None or is_collective(producer):
        return None
    r = ranks[0]
    inputs = [x for x in producer.inputs if x in status[r]]
    rels = [status[r].get(x) for x in inputs]
    counterpart = counterpart_of(seq, producer, rels, run.seq)
    if counterpart is None or counterpart.op != producer.op:
        return None
    s_inputs = [y for y in counterpart.inputs if isinstance(run.seq.get(y), Val)]
    if len(s_inputs) != len(inputs):
        return None
    peers = {q: g.node(producer.name) for q, g in enumerate(dist.graphs) if g.has(producer.name)}
    draw = _Draw(run.terms, seed)
    s_env: dict = {}
    d_envs: list[dict] = [dict() for _ in dist.graphs]
    try:
        for k, (x, y) in enumerate(zip(inputs, s_inputs)):
            sv, dtype = run.seq[y], y.type.dtype
            s_env[y] = draw.of(sv, dtype)
            pieces = None
            for q, pq in peers.items():
                xq = [i for i in pq.inputs if i in status[q]][k]
                dv, rel = run.dist[q].get(xq), status[q].get(xq)
                if isinstance(dv, Val) and dv.t == sv.t:
                    d_envs[q][xq] = draw.of(dv, dtype)
                elif rel is not None and rel.kind == "partial" and rel.partial == "sum":
                    pieces = pieces or draw.split(s_env[y], dist.world_size)
                    d_envs[q][xq] = pieces[q]
                else:
                    return None
            for rel in rels:  # the single-device tensors the diagnosis names
                if rel is not None and rel.seq_node not in s_env and isinstance(run.seq.get(rel.seq_node), Val):
                    s_env[rel.seq_node] = draw.of(run.seq[rel.seq_node], rel.seq_node.type.dtype)
    except OverflowError:
        cex = _elementwise_misaligned(run, draw, producer, counterpart, r)
        return None if cex is None else Evidence(d_envs=[dict() for _ in dist.graphs], counterexample=cex)
    env = _args_env(counterpart, s_env)
    if env is None:
        return None
    _outputs(seq.nodes, counterpart, _evaluate(counterpart, env), s_env)
    for q, pq in peers.items():
        env = _args_env(pq, d_envs[q])
        if env is None:
            return None
        _outputs(dist.graphs[q].nodes, pq, _evaluate(pq, env), d_envs[q])
    s_target = next((s for s in seq.nodes if s.op == "getitem" and s.args[:1] == (counterpart,)
                     and s.args[1] == node.args[1]), None) if producer is not node else counterpart
    targets = [dist.graphs[q].node(node.name) for q in peers]
    if s_target is None or len(targets) != dist.world_size:
        return None
    if not contradicts(s_env[s_target], [d_envs[q][t] for q, t in zip(peers, targets)], expected):
        return None
    return Evidence({y.name: s_env[y] for y in s_inputs}, s_env, d_envs)
