"""Symbolic interpretation: every tensor of both programs becomes ``term[layout]``."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..algebra.layout import Val, full
from ..algebra.terms import TermStore
from ..ir.graph import DistributedProgram, Graph, Node
from ..ops.registry import RuleCtx, apply_rule, failed_check, lookup
from .budget import check as check_budget
from .classes import ClassProof, tracked_ctx
from .lockstep import CollectiveMismatch, resolve, run_lockstep
from .tables import Tables


CLASS_PROOF = True  # interpret a node once per rank class where its members' operands agree (engine/classes.py)


@dataclass
class Unsupported:
    rank: int | None  # None: the single-device program
    node: Node
    reason: str


@dataclass
class SymbolicRun:
    terms: TermStore
    seq: dict
    dist: list[dict]
    unsupported: list[Unsupported] = field(default_factory=list)
    mismatch: CollectiveMismatch | None = None
    classes: dict | None = None  # local ops interpreted and reused per rank class (engine/classes.py)


def _opaque(terms: TermStore, node: Node, rank) -> object:
    def one(ty, path):
        if isinstance(ty, tuple):  # a list output (e.g. an out= list of a functionalized op)
            return tuple(one(t, path + (i,)) for i, t in enumerate(ty))
        if ty is None:
            return None
        return full(terms, terms.make("opaque", (node.op, node.name, rank, path[0] if len(path) == 1 else path), (),
                                      ty.shape))
    return one(node.type, ()) if isinstance(node.type, tuple) else one(node.type, (0,))


def _evaluator(terms: TermStore, inputs: dict[str, Val], unsupported: list, world: int, label,
               tables: Tables | None = None, ctx_type: type = RuleCtx):
    def eval_node(rank: int, node: Node, env: dict):
        out = _eval(rank, node, env)
        return out if tables is None else tables.settle(None if label == "seq" else rank, node, out)

    def _eval(rank: int, node: Node, env: dict):
        who = None if label == "seq" else rank
        check_budget(node, who)
        if node.op == "input":
            return inputs[node.name]
        if node.op == "constant":
            if node.type is None:
                return node.kwargs["value"]
            if node.kwargs.get("value") is None:  # a dump that does not print the constant's value
                if node.kwargs.get("shared"):  # stated to hold the same value in both programs
                    return full(terms, terms.make("shared_const", (node.kwargs["shared"],), (), node.type.shape))
                return _opaque(terms, node, who)
            return _const(terms, node)
        opdef = lookup(node.op)
        if opdef is None:
            unsupported.append(Unsupported(who, node, f"no rule for op {node.op}"))
            return _opaque(terms, node, who)
        failed = failed_check(opdef, node)
        if failed is not None:  # a convention the rule relies on does not hold here: never guess
            unsupported.append(Unsupported(who, node, failed))
            return _opaque(terms, node, who)
        args = resolve(node.args, env)
        kwargs = {k: resolve(v, env) for k, v in node.kwargs.items()}
        ctx = ctx_type(terms, node, rank, world)
        try:
            return apply_rule(opdef, ctx, args, kwargs)
        except Exception as exc:  # a rule that cannot handle these arguments: say so, never guess
            unsupported.append(Unsupported(who, node, f"rule for {node.op} failed: {type(exc).__name__}: {exc}"))
            return _opaque(terms, node, who)
    return eval_node


def _const(terms: TermStore, node: Node) -> Val:
    import numpy as np
    value = np.asarray(node.kwargs["value"])
    t = terms.make("const", (value.dtype.str, value.shape, value.tobytes()), (), value.shape)
    return full(terms, t)


def interpret(seq: Graph, dist: DistributedProgram, seq_inputs: dict[str, Val],
              dist_inputs: list[dict[str, Val]], terms: TermStore, wrap=None) -> SymbolicRun:
    """`wrap`: a function of the distributed evaluator and the tables returning another evaluator
    (engine/induction.py)."""
    unsupported: list[Unsupported] = []
    def eval_collective(nodes, args):
        opdef = lookup(nodes[0].op)
        failed = next((f for f in (failed_check(opdef, n) for n in nodes) if f is not None), None)
        if failed is not None:
            unsupported.append(Unsupported(None, nodes[0], failed))
            return [_opaque(terms, n, i) for i, n in enumerate(nodes)]
        ctx = RuleCtx(terms, nodes[0], 0, len(nodes))
        vals = [a[0] for a in args]
        try:
            return opdef.rule(ctx, vals, *args[0][1:])
        except Exception as exc:
            unsupported.append(Unsupported(None, nodes[0], f"rule for {nodes[0].op} failed: {exc}"))
            return [_opaque(terms, n, i) for i, n in enumerate(nodes)]

    # the single-device program may carry collectives over groups of one (TP=1 dumps)
    tables = Tables(terms)  # input-independent tensors, related by value
    seq_run = run_lockstep([seq], _evaluator(terms, seq_inputs, unsupported, 1, "seq", tables), eval_collective)
    terms.reference = frozenset(v.t for v in _vals(seq_run.envs[0].values()))
    world = dist.world_size

    reads = [0]  # the rules' reads of the rank (a node whose rule read it is interpreted per rank)
    ctx_type = tracked_ctx(reads) if CLASS_PROOF and dist.classes else RuleCtx
    evals = [_evaluator(terms, dist_inputs[r], unsupported, world, "dist", tables, ctx_type) for r in range(world)]
    by_class = ClassProof(dist, evals, reads, unsupported, tables) if ctx_type is not RuleCtx else None
    evaluate = by_class or (lambda r, n, env: evals[r](r, n, env))
    dist_run = run_lockstep(dist.graphs, wrap(evaluate, tables) if wrap else evaluate, eval_collective)
    return SymbolicRun(terms, seq_run.envs[0], dist_run.envs, unsupported, dist_run.mismatch,
                       by_class.stats() if by_class else None)


def _vals(values):
    for v in values:
        if isinstance(v, Val):
            yield v
        elif isinstance(v, (tuple, list)):
            yield from _vals(v)


def derive(terms: TermStore, program: Graph, inputs: dict[str, Val]) -> Val:
    """The value of a small single-rank program (a derived relation's formula) on given
    terms, built by the same op rules as the programs, so both build the same terms."""
    unsupported: list[Unsupported] = []
    run = run_lockstep([program], _evaluator(terms, inputs, unsupported, 1, "seq"), None)
    if unsupported:
        raise ValueError(unsupported[0].reason)
    return run.envs[0][program.outputs["value"]]
