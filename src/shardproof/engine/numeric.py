"""Reference numerics of both programs (numpy, float64), for counterexamples and for
confirming that a failed proof is a real difference. Never used to prove equality."""
from __future__ import annotations

import numpy as np

from ..ir.graph import DistributedProgram, Graph, Node
from ..ops.registry import lookup, run_numerics
from .lockstep import resolve, run_lockstep


class NumericError(RuntimeError):
    pass


def _eval_node(inputs: dict):
    def run(rank: int, node: Node, env: dict):
        if node.op == "input":
            return inputs[node.name]
        if node.op == "constant":
            if node.type is not None and node.kwargs.get("value") is None:
                raise NumericError(f"the value of constant {node.name} is not known (not printed in the dump)")
            return node.kwargs["value"]
        opdef = lookup(node.op)
        if opdef is None:
            raise NumericError(f"no numerics for {node.op}")
        args = resolve(node.args, env)
        kwargs = {k: resolve(v, env) for k, v in node.kwargs.items()}
        with np.errstate(all="ignore"):
            return run_numerics(opdef, node, args, kwargs)
    return run


def _eval_collective(nodes, args):
    opdef = lookup(nodes[0].op)
    return opdef.numerics([a[0] for a in args], *args[0][1:])


MAX_ELEMENTS = 1 << 25  # per tensor (256 MiB of float64): beyond that, no numeric evidence


def _tensor_types(ty):
    """The tensor types of an output type (tuples nest for list outputs)."""
    if isinstance(ty, tuple):
        for t in ty:
            yield from _tensor_types(t)
    elif ty is not None:
        yield ty


def _too_large(graphs, limit: int = MAX_ELEMENTS) -> str | None:
    """The first tensor of more than `limit` elements, in words; None when all fit."""
    for g in graphs:
        for n in g.nodes:
            for ty in _tensor_types(n.type):
                if ty.numel > limit:
                    where = f" of {g.label}" if g.label else ""
                    return f"{n.name}{where} has {ty.numel:,} elements (shape {list(ty.shape)})"
    return None


def check_evaluable(seq: Graph, dist: DistributedProgram) -> None:
    big = _too_large([seq] + dist.graphs)
    if big:
        raise NumericError(f"the programs are too large to evaluate numerically ({big}); capture them at a "
                           f"smaller configuration for counterexamples")


def evaluate(seq: Graph, dist: DistributedProgram, seq_inputs: dict, dist_inputs: list[dict]):
    """Returns (single-device env, [per-rank env]); envs map nodes to values. Callers gate
    on :func:`check_evaluable` first (before allocating the inputs)."""
    s = run_lockstep([seq], _eval_node(seq_inputs), _eval_collective)  # a group of one: identity
    runners = [_eval_node(dist_inputs[r]) for r in range(dist.world_size)]
    d = run_lockstep(dist.graphs, lambda r, n, env: runners[r](r, n, env), _eval_collective)
    return s.envs[0], d.envs


def derive(program: Graph, inputs: dict) -> np.ndarray:
    """The value of a small single-rank program (a derived relation's formula)."""
    return run_lockstep([program], _eval_node(inputs), _eval_collective).envs[0][program.outputs["value"]]
