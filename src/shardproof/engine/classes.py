"""The proof by rank class (issue 16, symmetry): a node is interpreted once per class of
ranks and its value reused by every member that reaches it with the same operand values.

A class (frontends/rank_classes.py) is a set of ranks whose graphs are one graph up to
their collectives' groups; the members' input relations are the same placement formula
instantiated at each member's mesh coordinate (a dp rank's batch block), so what a member
computes differs from its representative's only through the operands that formula makes
rank-specific. The interpreter runs every member's program as before (lockstep: the
collectives pair up per group exactly as without classes), but a member's local op is not
re-interpreted when

- its node is the class's node (same op, type, arguments and keyword arguments, operands
  by name), and
- its operands hold *the same* relations (term and layout) as the member that interpreted
  it first, and
- the op's rule did not read the rank it ran on (tracked), nor failed or met an op without
  a rule (those are interpreted per rank, so a finding names its own rank).

A rule is a function of the node, its operands' relations and the rank, so the value is the
one the member would have built: sharing is exact, never a guess. Values that the
placement formula makes rank-specific (a dp rank's activations and local gradients) differ
per member and are interpreted per member; everything the ranks hold alike (parameters,
their transposes and casts, the gradients after the dp all_reduce, the optimizer step) is
interpreted once per class. A rank whose program or input relation differs is in a class of
its own (nothing to share): today's path.
"""
from __future__ import annotations

from typing import Callable

from ..ir.graph import DistributedProgram, Node
from ..ops.registry import RuleCtx
from .lockstep import resolve


def tracked_ctx(reads: list) -> type:
    """A :class:`RuleCtx` that counts reads of its rank into ``reads[0]``."""

    class Tracked(RuleCtx):
        @property
        def rank(self):
            reads[0] += 1
            return self._rank

        @rank.setter
        def rank(self, value):
            self._rank = value
    return Tracked


def _shape(value, names: dict):
    """An argument structure with nodes by name (two ranks' derived nodes compare equal)."""
    if isinstance(value, Node):
        return ("node", value.name)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_shape(v, names) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple((k, _shape(v, names)) for k, v in sorted(value.items()))
    return value


def _same_node(a: Node, b: Node) -> bool:
    try:
        return (a.op == b.op and a.name == b.name and a.type == b.type
                and _shape(a.args, {}) == _shape(b.args, {}) and _shape(a.kwargs, {}) == _shape(b.kwargs, {}))
    except Exception:  # noqa: BLE001  (arguments that do not compare: not shared)
        return False


def shared_nodes(dist: DistributedProgram) -> dict[int, tuple[int, set]]:
    """rank -> (its class's number, the names of its nodes that are its class's node): only
    the classes of more than one rank whose members' graphs were derived."""
    out: dict[int, tuple[int, set]] = {}
    for i, cls in enumerate(dist.classes or []):
        ranks = cls.get("ranks") or []
        if len(ranks) < 2 or not cls.get("derived"):
            continue
        rep = dist.graphs[cls["representative"]]
        rep_nodes = {n.name: n for n in rep.nodes}
        for r in ranks:
            same = {n.name for n in dist.graphs[r].nodes
                    if n.name in rep_nodes and (r == cls["representative"] or _same_node(n, rep_nodes[n.name]))}
            out[r] = (i, same)
    return out


def _key(value):
    """A hashable key of a resolved operand: a relation by term and layout; None where a
    value has no such key (the node is then interpreted per rank)."""
    from ..algebra.layout import Val
    if isinstance(value, Val):
        return ("val",) + value.key()
    if isinstance(value, (list, tuple)):
        keys = tuple(_key(v) for v in value)
        return None if any(k is None for k in keys) else (type(value).__name__,) + keys
    if value is None or isinstance(value, (bool, int, float, complex, str)):
        return ("lit", type(value).__name__, value)
    return None


class ClassProof:
    """Wraps the per-rank evaluators of the distributed program (see the module doc).
    `stats()`: local ops interpreted and reused, per class."""

    def __init__(self, dist: DistributedProgram, evals: list[Callable], reads: list, unsupported: list,
                 tables=None):
        self.shared = shared_nodes(dist)
        self.evals = evals
        self.reads = reads
        self.unsupported = unsupported
        self.tables = tables
        self.memo: dict = {}
        self.rank_specific: set = set()  # (class, node name): its rule read the rank
        self.interpreted = [0] * len(dist.graphs)
        self.reused = [0] * len(dist.graphs)

    def __call__(self, rank: int, node: Node, env: dict):
        where = self.shared.get(rank)
        if where is None or node.name not in where[1] or node.op == "input":
            self.interpreted[rank] += 1
            return self.evals[rank](rank, node, env)
        cls = where[0]
        key = None
        if (cls, node.name) not in self.rank_specific:
            try:
                key = (cls, node.name, _key(resolve(node.args, env)),
                       _key(tuple(resolve(v, env) for _, v in sorted(node.kwargs.items()))))
            except Exception:  # noqa: BLE001
                key = None
            if key is not None and (key[2] is None or key[3] is None):
                key = None
        if key is not None and key in self.memo:
            out, table = self.memo[key]
            from .budget import check as check_budget
            check_budget(node, rank)
            if table is not None and self.tables is not None:
                self.tables.values[(rank, node.name)] = table
            self.reused[rank] += 1
            return out
        reads, failed = self.reads[0], len(self.unsupported)
        out = self.evals[rank](rank, node, env)
        self.interpreted[rank] += 1
        if self.reads[0] != reads:
            self.rank_specific.add((cls, node.name))
        elif key is not None and len(self.unsupported) == failed:
            table = None if self.tables is None else self.tables.values.get((rank, node.name))
            self.memo[key] = (out, table)
        return out

    def stats(self) -> dict:
        """Per rank: local ops interpreted and reused; totals."""
        return {"interpreted": sum(self.interpreted), "reused": sum(self.reused),
                "interpreted_by_rank": list(self.interpreted), "reused_by_rank": list(self.reused)}
