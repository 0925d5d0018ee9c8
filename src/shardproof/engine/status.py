"""The relation each distributed tensor holds to the single-device program, per rank: the
status that verification checks the outputs with and localization walks (held, partial,
a view, a piece of a reduction, an exact multiple, a constant, ...). No I/O."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..algebra.layout import Val, full, vec_array
from ..algebra.terms import TermStore
from ..ir.graph import DistributedProgram, Node
from ..relations.spec import Slices, chunk_bounds
from .symbolic import SymbolicRun

if TYPE_CHECKING:  # annotations only
    from .verify import Relater


VIEW_TERMS = ("reshape", "permute")


@dataclass
class Related:
    seq_node: Node
    positions: Optional[list]  # per dim: positions in the single-device tensor (None = all); None unless held
    partial: Optional[str] = None  # the reduce op when the ranks' values combine to seq_node
    kind: str = "held"  # held | partial | view (a reshape/permute of it) | piece (of a reduction) | scaled | const
    #                     | packed (a concatenation of related tensors)
    #                     | input | local (rank-local index arithmetic, masks, recognized lookup pieces)
    factor: Optional[object] = None  # scaled: the exact factor times the held value; softmax-state: its role

    @property
    def exact(self) -> bool:
        """Whether the tensor equals (a piece of) a single-device value (not a multiple of one)."""
        return self.kind != "scaled"

    def describe(self) -> str:
        if self.kind == "partial":
            return f'Partial("{self.partial}")'
        if self.kind == "scaled":
            return f"{self.factor} times"
        return {"view": "a view", "const": "a constant", "input": "an input", "piece": "a piece of the reduction",
                "softmax-state": f"a partial online-softmax {self.factor} over some key blocks",
                "local": "a rank-local index or piece",
                "packed": "a concatenation of related tensors", "padded": "held, with zero padding",
                "padded-lanes": "held, with padding lanes (not zero)"}.get(self.kind, "held")


def _tensor_vals(value) -> list:
    if isinstance(value, Val):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, Val)]
    return []


def positions_in(terms: TermStore, sval: Val, dval: Val) -> Optional[list]:
    """Where `dval`'s elements sit inside `sval` (same term, or one the caller knows has the
    same index structure, e.g. a scaled copy), per dim; None if not inside or of another rank
    (different dims: an op's output against its input)."""
    ts = terms.shape(sval.t)
    if len(dval.vecs) != len(ts) or len(sval.vecs) != len(ts):
        return None
    out = []
    for d in range(len(ts)):
        s_idx, d_idx = vec_array(sval.vecs[d], ts[d]), vec_array(dval.vecs[d], ts[d])
        if (sval.vecs[d] is None and dval.vecs[d] is None) or np.array_equal(s_idx, d_idx):
            out.append(None)  # the same picks (repeated ones too, as repeat_interleave makes): in place
            continue
        inv = np.full(ts[d], -1, dtype=np.int64)
        inv[s_idx] = np.arange(len(s_idx))
        pos = inv[d_idx]
        if (pos < 0).any():
            return None
        out.append(None if len(pos) == len(s_idx) and np.array_equal(pos, np.arange(len(s_idx))) else pos)
    return out


LOCAL_PIECES = {"lookup_in", "range_lookup"}  # lemma forms: a rank's piece of a sum over ranks


def _status(run: SymbolicRun, relater: Relater, dist: DistributedProgram):
    """Per rank, per node: Related or None (tensor nodes only)."""
    world = dist.world_size
    by_name = [{n.name: n for n in g.nodes} for g in dist.graphs]
    status: list[dict] = [dict() for _ in range(world)]

    def peer_values(n: Node):
        """The values of the tensor named like `n` on every rank (None if a rank lacks it)."""
        peers = [by_name[q].get(n.name) for q in range(world)]
        return None if any(p is None for p in peers) else [run.dist[q].get(p) for q, p in enumerate(peers)]

    for r, g in enumerate(dist.graphs):
        for n in g.nodes:
            v = run.dist[r].get(n)
            if not isinstance(v, Val):
                continue
            if n.op == "input":
                status[r][n] = relater.direct(v) or Related(n, None, kind="input")
                continue
            if relater.is_constant(v.t):
                status[r][n] = Related(n, None, kind="const")
                continue
            rel = relater.direct(v)
            if rel is not None and rel.exact:
                rel = _scale_carried(relater, run.seq, n, v, [status[r].get(x) for x in n.inputs]) or rel
            if rel is None and peer_values(n) is not None:
                rel = relater.partial(peer_values(n))
            rel = rel or relater.piece(v) or relater.scaled(v) or _packed(relater, v, peer_values(n))
            if rel is None and _rank_local(run.terms, n, v, status[r]):
                rel = Related(n, None, kind="local")
            status[r][n] = rel
    return status


def _packed(relater: Relater, v: Val, peers: list | None) -> Optional[Related]:
    """A whole concatenation whose every piece relates to a single-device tensor, exactly or
    as a partial sum across the ranks (a flattened gradient bucket): a legitimate
    intermediate, whose slices relate again where they cut the pieces back out."""
    terms = relater.terms

    def unviewed(t: int):  # a view of a whole concatenation holds the same elements (a flat buffer)
        while terms[t].op in VIEW_TERMS:
            t = terms[t].children[0]
        return terms[t]
    term = unviewed(v.t)
    if term.op != "cat" or any(x is not None for x in v.vecs) or peers is None:
        return None
    peer_terms = [unviewed(p.t) if isinstance(p, Val) and all(x is None for x in p.vecs) else None for p in peers]
    if any(p is None or p.op != "cat" or len(p.children) != len(term.children) for p in peer_terms):
        return None
    first, partial = None, None
    for i, child in enumerate(term.children):
        whole = lambda t: full(terms, t)  # noqa: E731
        rel = relater.direct(whole(child)) or relater.partial([whole(p.children[i]) for p in peer_terms])
        if rel is None:
            return None
        first, partial = first or rel, partial or rel.partial
    return Related(first.seq_node, None, partial=partial, kind="packed")  # partial: pieces the ranks must sum


def _rank_local(terms: TermStore, node: Node, v: Val, status: dict) -> bool:
    """A value every correct program may hold without a single-device counterpart: index
    arithmetic and masks computed from related integer/boolean tensors and constants (a
    rank's vocabulary range), or a piece a lemma recognized (a lookup within the rank's
    range). Its readers, not it, are where a relation can break."""
    if terms[v.t].op in LOCAL_PIECES:
        return True
    dtype = getattr(node.type, "dtype", "")
    return dtype.startswith(("b", "i", "u")) and all(
        status.get(x) is not None and (status[x].kind in ("input", "const", "local") or
                                       str(getattr(x.type, "dtype", "")).startswith(("b", "i", "u")))
        for x in node.inputs if x in status)


def _diagonal(pairs: bytes) -> bool:
    """Whether a contraction's index pairs (i, j) all have i == j (distinct, so a subset)."""
    p = np.frombuffer(pairs, dtype=np.int64).reshape(-1, 2)
    return bool(np.all(p[:, 0] == p[:, 1])) and len(np.unique(p[:, 0])) == len(p)


def _seq_counterpart(seq_env: dict, node: Node, input_rels: list) -> Optional[Node]:
    """The single-device node applying `node`'s op, with its constant arguments, to the
    counterparts of its inputs (compared by value: the same term), or None."""
    def term(x):
        v = seq_env.get(x)
        return getattr(v, "t", None)
    want = [term(rel.seq_node) if rel is not None else None for rel in input_rels]
    consts = [a for a in node.args if not isinstance(a, Node)]
    return next((s for s in seq_env if s.op == node.op and [term(x) for x in s.inputs] == want
                 and [a for a in s.args if not isinstance(a, Node)] == consts), None)


def _scale_carried(relater: Relater, seq_env: dict, node: Node, v: Val, input_rels: list) -> Optional[Related]:
    """`node` reads an exact multiple (c times) of a value and applies the op its
    single-device counterpart applies: relate it as the multiple of that counterpart that it
    is, proven on the terms, rather than as an equal of another tensor it happens to match
    (c = 2 times a gradient, halved as the counterpart halves it, equals the unhalved one).
    The multiple's trail then stays unbroken up to where it is rescaled or returned."""
    factors = {rel.factor for rel in input_rels if rel is not None and rel.kind == "scaled"}
    if not factors or any(rel is None for rel in input_rels):
        return None
    counterpart = _seq_counterpart(seq_env, node, input_rels)
    want = seq_env.get(counterpart) if counterpart is not None else None
    if not isinstance(want, Val):
        return None
    from ..algebra.lemmas import linear
    for c in factors:
        if linear(relater.terms, {want.t: Fraction(c)}, relater.terms.shape(want.t)) == v.t:
            pos = positions_in(relater.terms, want, v)
            if pos is not None:
                return Related(counterpart, pos, kind="scaled", factor=c)
    return None


def in_order(positions) -> bool:
    """Whether no dim holds distinct elements out of order (repeats -- an expand, a tile -- are
    not a reordering)."""
    return positions is None or all(p is None or bool(np.all(np.diff(p) >= 0)) or len(np.unique(p)) < len(p)
                                    for p in positions)


def reorders(node: Node, rel: Related, status: dict) -> bool:
    """Whether `node` holds single-device elements out of their order along a dim while its
    inputs hold theirs in order: a legitimate layout keeps pieces in order, so the op that
    reorders (halves swapped, outputs crossed) is suspect -- it is where a violation shows
    first when the reordered value is consumed as if it were in order."""
    if rel.kind != "held" or in_order(rel.positions):
        return False
    return all(status.get(x) is None or status[x].kind != "held" or in_order(status[x].positions)
               for x in node.inputs)


def summarize(positions_by_rank: list[list], shape: tuple, world: int) -> str:
    """Name the relation a set of per-rank positions forms (Replicate, Shard, Slices, ...)."""
    if all(all(p is None for p in pos) for pos in positions_by_rank):
        return "Replicate()"
    dims = {d for pos in positions_by_rank for d, p in enumerate(pos) if p is not None}
    if len(dims) == 1:
        d = dims.pop()
        ranges = {}
        for r, pos in enumerate(positions_by_rank):
            p = pos[d]
            if p is None:
                ranges[r] = (0, shape[d])
            elif len(p) and np.array_equal(p, np.arange(p[0], p[0] + len(p))):
                ranges[r] = (int(p[0]), int(p[0] + len(p)))
            else:
                return f"Gathered(dim={d})"
        if all(ranges[r] == chunk_bounds(shape[d], world, r) for r in ranges):
            return f"Shard({d})"
        return str(Slices(d, ranges))
    return "Gathered(" + ", ".join(f"dim={d}" for d in sorted(dims)) + ")"
