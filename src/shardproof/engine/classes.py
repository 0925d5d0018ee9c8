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
from .budget import check as check_budget
from .lockstep import is_collective


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


def _same_args(x, y) -> bool:
    """Whether two argument structures are equal with nodes compared by name (two ranks'
    derived nodes compare equal): containers of one type walked item by item, anything else
    by ``==``. Exact and without building either side's structure (it runs per node of every
    member)."""
    if type(x) is not type(y):
        return False
    if isinstance(x, Node):
        return x.name == y.name
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(a is b or _same_args(a, b) for a, b in zip(x, y))
    if isinstance(x, dict):
        return len(x) == len(y) and all(k in y and _same_args(v, y[k]) for k, v in x.items())
    return bool(x == y)


def _same_node(a: Node, b: Node) -> bool:
    """Whether `b` can stand for `a`: op, name, type, arguments and keyword arguments (operands
    by name) and operand types (a rule may read an operand's strides) all equal."""
    try:
        return (a.op == b.op and a.name == b.name and a.type == b.type and _same_args(a.args, b.args)
                and _same_args(a.kwargs, b.kwargs) and _same_operand_types(a, b))
    except Exception:  # noqa: BLE001  (arguments that do not compare: not shared)
        return False


def _same_layout(x, y) -> bool:
    """Equal strides and storage offset (a TensorType's equality leaves them out)."""
    return getattr(x, "strides", None) == getattr(y, "strides", None) \
        and getattr(x, "offset", None) == getattr(y, "offset", None)


def _same_operand_types(a: Node, b: Node) -> bool:
    """Equal operand types; for the ``as_strided`` family, whose rules read the operand's
    storage layout (ops/strided.py; a dp rank's batch slice lies at another offset), equal
    layouts too. No other rule reads a layout."""
    xs, ys = tuple(a.inputs), tuple(b.inputs)
    layout = "as_strided" in a.op
    return len(xs) == len(ys) and all(x.type == y.type and (not layout or _same_layout(x.type, y.type))
                                      for x, y in zip(xs, ys))


class ClassProof:
    """Wraps the per-rank evaluators of the distributed program (see the module doc).
    `stats()`: local ops interpreted and reused, per rank.

    Operands are compared by identity: a value one member interpreted and the others reused
    is one object; the values that enter otherwise (inputs, collectives' results) are
    interned by their relation (term and layout), once per object."""

    def __init__(self, dist: DistributedProgram, evals: list[Callable], reads: list, unsupported: list,
                 tables=None):
        self.cls = {r: i for i, c in enumerate(dist.classes or []) if len(c.get("ranks") or []) > 1
                    and c.get("derived") for r in c["ranks"]}
        self.evals = evals
        self.reads = reads
        self.unsupported = unsupported
        self.tables = tables
        self.memo: dict = {}  # (class, node name, operands) -> (node, value, table value)
        self.same: dict = {}  # (rank, node name) -> whether its node is the one the memo entry was made from
        self.interned: dict = {}  # relation key -> the first object holding it
        self.by_id: dict = {}  # id(object) -> (its interned object, the object: kept alive)
        self.rank_specific: set = set()  # (class, node name): its rule read the rank
        self.interpreted = [0] * len(dist.graphs)
        self.reused = [0] * len(dist.graphs)
        from .parametric import PARAMETRIC, Parametric
        self.param = Parametric(dist, tables.terms) if PARAMETRIC and tables is not None else None
        self.signatures: dict = {}  # id(node) -> its operands (nodes live as long as the run)

    def _intern(self, value):
        from ..algebra.layout import Val
        if isinstance(value, (tuple, list)):
            return type(value)(self._intern(v) for v in value)
        if not isinstance(value, Val):
            return value
        hit = self.by_id.get(id(value))
        if hit is None:
            hit = (self.interned.setdefault(value.key(), value), value)
            self.by_id[id(value)] = hit
        return hit[0]

    def _operand(self, node: Node, env: dict):
        value = env[node]
        return self._identity(self._intern(value) if node.op == "input" or is_collective(node) else value)

    def _identity(self, value):
        """A key of a value: literals by value, sequences by their items' keys, anything else
        by the identity of an object that lives as long as the run (an environment's value, or
        an interned one)."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return ("lit", type(value).__name__, value)
        if isinstance(value, (tuple, list)):
            return ("seq",) + tuple(self._identity(v) for v in value)
        return id(value)

    def __call__(self, rank: int, node: Node, env: dict):
        cls = self.cls.get(rank)
        if self.param is not None and cls is not None:
            self.param.see(rank, env)
            if node.op != "input":
                out = self._derived(rank, cls, node, env)
                if out is not None:
                    return out
        if cls is None or node.op == "input":
            self.interpreted[rank] += 1
            out = self.evals[rank](rank, node, env)
            return out if cls is None else self._intern(out)
        key = None
        if (cls, node.name) not in self.rank_specific:
            key = (cls, node.name, tuple(self._operand(x, env) for x in node.inputs))
            hit = self.memo.get(key)
            if hit is not None:
                same = self.same.get((rank, node.name))
                if same is None:
                    same = self.same[(rank, node.name)] = node is hit[0] or _same_node(node, hit[0])
                if same:
                    check_budget(node, rank)
                    if hit[2] is not None and self.tables is not None:
                        self.tables.values[(rank, node.name)] = hit[2]
                    self.reused[rank] += 1
                    return hit[1]
                key = None
        reads, failed = self.reads[0], len(self.unsupported)
        out = self.evals[rank](rank, node, env)
        self.interpreted[rank] += 1
        if self.reads[0] != reads:
            self.rank_specific.add((cls, node.name))
        elif key is not None and len(self.unsupported) == failed and key not in self.memo:
            table = None if self.tables is None else self.tables.values.get((rank, node.name))
            self.memo[key] = (node, out, table)
        return out

    def _derived(self, rank: int, cls: int, node: Node, env: dict):
        """A parametric member's value as another member's re-indexed (engine/parametric.py)."""
        if (cls, node.name) in self.rank_specific:
            return None
        a = self.param.source(rank, node.name)
        if a is None:
            return None
        twin = self.param.names[a].get(node.name)
        same = self.same.get((rank, node.name, a))
        if same is None:  # op, type, arguments (a scalar, a dim) and operand types: graphs need not come from derive_graph
            same = self.same[(rank, node.name, a)] = twin is not None and (node is twin or _same_node(node, twin))
        out = self.param.derive(rank, node, self._inputs(node), env, a) if same else None
        if out is not None:
            check_budget(node, rank)
            table = None if self.tables is None else self.tables.values.get((a, node.name))
            if table is not None:  # input-independent: the same program computes the same value
                self.tables.values[(rank, node.name)] = table
            self.reused[rank] += 1
        return out

    def _inputs(self, node: Node) -> tuple:
        """The node's operands, kept as a tuple (Node.inputs is a generator; read per member)."""
        hit = self.signatures.get(id(node))
        if hit is None:
            hit = self.signatures[id(node)] = tuple(node.inputs)
        return hit

    def stats(self) -> dict:
        """Per rank: local ops interpreted and reused; totals."""
        out = {"interpreted": sum(self.interpreted), "reused": sum(self.reused),
               "interpreted_by_rank": list(self.interpreted), "reused_by_rank": list(self.reused)}
        if self.param is not None:
            out["parametric"] = {"ranks": [{"rank": r, "representative": self.param.rep[r], "block": b}
                                           for r, b in self.param.ranks().items()],
                                 "derived_by_rank": list(self.param.derived)}
        return out
