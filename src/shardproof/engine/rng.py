"""Corresponding randomness for confirming a proof by execution.

The proof assumes that random ops (dropout, bernoulli, rand) draw *the same randomness for
corresponding elements*: a rank's draw is a piece of the single-device draw, laid out as
the proved relation of the random op's output says. Running the programs for real must
honour that assumption and nothing more: the single-device program draws each random
tensor from a seed (:func:`stream_key`), and each rank's random op receives the elements
of the single-device draw its output corresponds to (:class:`Draw`: positions per dim, a
``Shard`` slice, a ``Replicate`` copy, any pure layout).

When the relation of a rank's random output is not a pure layout of one single-device
draw (another size, no single-device counterpart, several candidates), the programs
cannot be run with corresponding randomness: :attr:`RandomPlan.blocked` says why, and the
confirmation is skipped (the verdict stays unknown), never passed.

Torch-free: the executor (frontends/torch_exec.py) draws the values."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Optional

from ..ir.graph import DistributedProgram, Graph, Node, TensorType

UNIFORM = {"aten.native_dropout", "aten.dropout", "aten.bernoulli", "aten.rand", "aten.rand_like"}
NORMAL = {"aten.randn", "aten.randn_like"}
DRAWN = UNIFORM | NORMAL
"""Random ops the confirmation runs with corresponding randomness (others: not executable)."""
RANDOM_OPS = DRAWN | {
    "aten.randint", "aten.randint_like", "aten.normal", "aten.uniform", "aten.randperm", "aten.multinomial",
    "aten.rrelu", "aten.rrelu_with_noise", "aten.exponential", "aten.geometric", "aten.cauchy", "aten.log_normal",
    "aten.random", "prims.inductor_random", "prims.inductor_seeds"}
"""Every op that draws randomness (a program with one of the others is not executed)."""


@dataclass(frozen=True)
class Draw:
    """Where a random op's draw comes from: the single-device node `seq_node` (its draw has
    shape `shape`), the elements at `positions` (per dim: None for all, else indices)."""
    seq_node: str
    shape: tuple
    positions: tuple
    normal: bool = False

    def layout(self) -> str:
        """In words: which elements of the single-device draw this rank receives."""
        if all(p is None for p in self.positions):
            return f"all of {self.seq_node}'s draw (a copy)"
        dims = [f"dim {d}: [{int(p[0])}..{int(p[-1])}]" if len(p) else f"dim {d}: none"
                for d, p in enumerate(self.positions) if p is not None]
        return f"{self.seq_node}'s draw at " + ", ".join(dims)


@dataclass
class RandomPlan:
    """The single-device random nodes (name -> draw shape), each rank's random node -> its
    :class:`Draw`, and why the programs cannot run with corresponding randomness (None: they can)."""
    seq: dict = field(default_factory=dict)
    ranks: list = field(default_factory=list)
    blocked: Optional[str] = None


def stream_key(seed: int, seq_node: str) -> int:
    """The generator seed of a single-device random node's draw in value set `seed`."""
    return zlib.crc32(f"{seed}:{seq_node}".encode())


def draw_shape(node: Node) -> Optional[tuple]:
    """The shape of a random node's draw: its (first) output's."""
    ty = node.type[0] if isinstance(node.type, tuple) else node.type
    return tuple(ty.shape) if isinstance(ty, TensorType) else None


def plan_randomness(seq: Graph, dist: DistributedProgram, bindings: dict) -> Optional[RandomPlan]:
    """The corresponding draws of every rank's random op, read off a symbolic run of both
    programs under the proved input relations; None when no program draws anything."""
    seq_random = [n for n in seq.nodes if n.op in RANDOM_OPS]
    rank_random = [[n for n in g.nodes if n.op in RANDOM_OPS] for g in dist.graphs]
    if not seq_random and not any(rank_random):
        return None
    plan = RandomPlan({n.name: draw_shape(n) for n in seq_random}, [dict() for _ in dist.graphs])
    undrawn = [n for n in seq_random + [m for ns in rank_random for m in ns] if n.op not in DRAWN]
    if undrawn:
        plan.blocked = (f"random op {undrawn[0].op} at node {undrawn[0].name}: the executor cannot draw it with "
                        f"corresponding randomness")
        return plan
    if not any(rank_random):
        return plan
    from ..algebra.terms import TermStore
    from .status import _tensor_vals, positions_in
    from .symbolic import interpret
    from .verify import _input_vals
    terms = TermStore()
    seq_in, dist_in = _input_vals(terms, seq, dist, bindings)
    run = interpret(seq, dist, seq_in, dist_in, terms)
    seq_vals = [(n, (_tensor_vals(run.seq.get(n)) or [None])[0]) for n in seq_random]
    for r, nodes in enumerate(rank_random):
        for n in nodes:
            dval = (_tensor_vals(run.dist[r].get(n)) or [None])[0]
            found = [(m, sv) for m, sv in seq_vals if dval is not None and sv is not None and sv.t == dval.t
                     and (m.op in NORMAL) == (n.op in NORMAL)]
            if len(found) > 1:
                found = [(m, sv) for m, sv in found if m.name == n.name] or found
            pos = positions_in(terms, found[0][1], dval) if len(found) == 1 else None
            if pos is None:
                why = ("its values correspond to no single-device draw" if not found else
                       f"it corresponds to several single-device draws ({', '.join(m.name for m, _ in found)})"
                       if len(found) > 1 else f"its values are not a pure layout of {found[0][0].name}'s draw")
                plan.blocked = (f"random op {n.op} at node {n.name} on rank {r}: {why}, so the programs cannot "
                                f"be run with corresponding randomness")
                return plan
            m = found[0][0]
            plan.ranks[r][n.name] = Draw(m.name, plan.seq[m.name], tuple(pos), m.op in NORMAL)
    return plan
