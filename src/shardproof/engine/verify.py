"""Verification of a distributed program against a single-device program.

1. Interpret both programs symbolically (``symbolic``): every tensor becomes
   ``term[layout]`` over the single-device inputs, under the input relations.
2. Each expected output relation holds iff the distributed output's term is the
   single-device output's term and its layouts are the expected ones: a proof.
3. Otherwise evaluate both programs numerically: a difference is a violation, localized
   to the first distributed tensor whose relation to the single-device program breaks;
   no difference means the rules could not decide (unknown), never "verified".
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import numpy as np

from ..algebra.layout import Val, full, vec_array, view_term
from ..algebra.masks import make_fill
from ..algebra.ranks import COMPLETES, combine
from ..algebra.terms import TermStore
from ..ir.graph import DistributedProgram, Graph, Node
from ..relations.infer import InputRelation, relation_by_value
from ..relations.spec import (DERIVED, Ignore, OutsideBlock, Partial, Relation, RelationError, Shard, Slices,
                              chunk_bounds, held, layout_index)
from .diagnose import SLICING_OPS
from .localize import autograd_accumulation, completes, gradient_accumulation_blame, misshaped_view, partial_origin, view_blame
from .numeric import check_evaluable, evaluate
from .assumptions import input_breaches
from .numeric import derive as derive_numeric
from .result import Finding, OutputCheck, Report
from .symbolic import SymbolicRun, derive, interpret

ASSUMPTIONS = [
    "real arithmetic: floating-point rounding and summation order are not modelled",
    "widening float casts and int -> float32/float64 casts preserve value; narrowing float casts "
    "(to bf16/f16, f64 -> f32) and casts to int or bool are modelled exactly (their rounding is a term)",
    "random ops (dropout) draw the same randomness for corresponding elements",
    "uninitialized (empty) buffers carry no value",
    "class targets and token ids are valid indices, none equal to ignore_index (checked against the example inputs)",
]
VIEW_TERMS = ("reshape", "permute")
ENGINE_STAGES = ("interpreting both programs symbolically", "checking the outputs",
                 "evaluating both programs numerically", "localizing the first divergence")
PIECEWISE = {"div": 2, "lin": 1, "reshape": 1, "permute": 1}  # term ops linear in child 0 (children count)
VARYING_LEAVES = {"input", "ignored", "opaque", "partial_input"}

# ---------------------------------------------------------------- relations of tensors

@dataclass
class Related:
    seq_node: Node
    positions: Optional[list]  # per dim: positions in the single-device tensor (None = all); None unless held
    partial: Optional[str] = None  # the reduce op when the ranks' values combine to seq_node
    kind: str = "held"  # held | partial | view (a reshape/permute of it) | piece (of a reduction) | scaled | const
    #                     | packed (a concatenation of related tensors)
    #                     | input | local (rank-local index arithmetic, masks, recognized lookup pieces)
    factor: Optional[object] = None  # scaled: the exact factor times the held value

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
                "local": "a rank-local index or piece",
                "packed": "a concatenation of related tensors"}.get(self.kind, "held")


def _tensor_vals(value) -> list:
    if isinstance(value, Val):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, Val)]
    return []


def positions_in(terms: TermStore, sval: Val, dval: Val) -> Optional[list]:
    """Where `dval`'s elements sit inside `sval` (same term), per dim; None if not inside."""
    ts = terms.shape(sval.t)
    out = []
    for d in range(len(ts)):
        s_idx, d_idx = vec_array(sval.vecs[d], ts[d]), vec_array(dval.vecs[d], ts[d])
        if sval.vecs[d] is None and dval.vecs[d] is None:
            out.append(None)
            continue
        inv = np.full(ts[d], -1, dtype=np.int64)
        inv[s_idx] = np.arange(len(s_idx))
        pos = inv[d_idx]
        if (pos < 0).any():
            return None
        out.append(None if len(pos) == len(s_idx) and np.array_equal(pos, np.arange(len(s_idx))) else pos)
    return out


class Relater:
    """Answers "which single-device tensor does this distributed value equal, and how"."""

    def __init__(self, terms: TermStore, seq: Graph, seq_env: dict):
        self.terms = terms
        self.by_term: dict[int, list[tuple[Node, Val]]] = {}
        self._constant: dict[int, bool] = {}
        vals = [(node, v) for node in seq.nodes for v in _tensor_vals(seq_env.get(node))]
        # name tensors by the node that is the tensor (a getitem), not by a multi-output op
        vals.sort(key=lambda nv: isinstance(seq_env.get(nv[0]), tuple))
        for node, v in vals:
            self.by_term.setdefault(v.t, []).append((node, v))
        # Values the single-device program computes inside a fused op (the matmul inside
        # addmm, ...) are legitimate intermediates of the distributed program too.
        for node, v in vals:
            stack = list(terms[v.t].children)
            while stack:
                t = stack.pop()
                if t in self.by_term:
                    continue
                self.by_term[t] = [(node, full(terms, t))]
                stack.extend(terms[t].children)

    def direct(self, dval) -> Optional[Related]:
        if not isinstance(dval, Val):
            return None
        best = None
        for node, sval in self.by_term.get(dval.t, ()):
            pos = positions_in(self.terms, sval, dval)
            if pos is not None:
                rel = Related(node, pos)
                if all(p is None for p in pos):
                    return rel
                best = best or rel
        return best or self._view_of_known(dval.t)

    def scaled(self, dval) -> Optional[Related]:
        """An exact multiple of a single-device value (an average's sum before its division,
        a loss-scaled gradient): not equal, but one scale away."""
        from ..algebra.lemmas import scaled_part
        found = scaled_part(self.terms, dval.t) if isinstance(dval, Val) else None
        rel = self.direct(Val(found[0], dval.vecs)) if found is not None else None
        if rel is None or rel.kind != "held":
            return None
        return Related(rel.seq_node, rel.positions, kind="scaled", factor=found[1])

    def piece(self, dval) -> Optional[Related]:
        """A reduction over part of a dim whose whole the single-device program computes
        (one micro-batch's or one rank's share of a sum), or such a share scaled or divided
        as the whole is: a legitimate intermediate."""
        whole = self._whole_of(dval.t) if isinstance(dval, Val) else None
        return None if whole is None else Related(self.by_term[whole][0][0], None, kind="piece")

    def _whole_of(self, t: int) -> Optional[int]:
        """The single-device term that `t`, a share of it, adds up to with the other shares."""
        term, terms = self.terms[t], self.terms
        if term.op == "dot" and term.attrs[1] is not None:
            if not all(o is None or _diagonal(o) for o in term.attrs[1]):
                return None  # pairs A[i]*B[j] with i != j: not a share of the contraction
            whole = terms.make("dot", (term.attrs[0], None), term.children, term.shape)
        elif COMPLETES.get(term.op) is not None and len(term.attrs) >= 3 and term.attrs[2] is not None:
            whole = terms.make(term.op, term.attrs[:2] + (None,) + term.attrs[3:], term.children, term.shape)
        elif term.op == "lin" and len(term.children) > 1:  # shares of several sums: a share of their sum
            from ..algebra.lemmas import linear
            parts = [self._whole_of(c) for c in term.children]
            whole = None if None in parts else linear(terms, dict(zip(parts, term.attrs)), term.shape)
        elif term.op in PIECEWISE and len(term.children) == PIECEWISE[term.op]:
            inner = self._whole_of(term.children[0])  # linear in its first operand, the others shared
            if inner is None:
                return None
            whole = view_term(terms, term.op, term.attrs, inner, term.shape) if term.op in VIEW_TERMS else \
                terms.make(term.op, term.attrs, (inner,) + term.children[1:], term.shape)  # views collapse as built
        else:
            return None
        return whole if whole in self.by_term else None

    def is_constant(self, t: int) -> bool:
        """Whether a term depends on no input (masks, ranges, fills built in the program)."""
        if t not in self._constant:
            term = self.terms[t]
            self._constant[t] = term.op not in VARYING_LEAVES and all(self.is_constant(c) for c in term.children)
        return self._constant[t]

    def _view_of_known(self, t: int) -> Optional[Related]:
        """A reshape/permute of a value the single-device program computes is related
        (as a view of it): the programs may merely view it differently."""
        seen = 0
        while self.terms[t].op in VIEW_TERMS and seen < 8:
            t, seen = self.terms[t].children[0], seen + 1
            if t in self.by_term:
                return Related(self.by_term[t][0][0], None, kind="view")
        return None

    def partial(self, dvals: list) -> Optional[Related]:
        if len(dvals) < 2 or not all(isinstance(v, Val) for v in dvals):
            return None
        if all(v.same(dvals[0]) for v in dvals):
            return None
        for op in ("sum", "max"):
            try:
                whole = combine(self.terms, dvals, op)
            except Exception:
                return None
            rel = self.direct(whole)
            if rel is not None:
                return Related(rel.seq_node, None, op, kind="partial")
        return None


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


# ---------------------------------------------------------------- inputs

def _input_vals(terms: TermStore, seq: Graph, dist: DistributedProgram, bindings: dict[str, InputRelation]):
    seq_vals = {n.name: full(terms, terms.make("input", (n.name, n.type.dtype), (), n.shape)) for n in seq.inputs}
    seq_shapes = {n.name: n.shape for n in seq.inputs}
    for name in _whole_range_masks(bindings):
        seq_vals[name] = full(terms, make_fill(terms, False, seq_shapes[name]))
    per_rank = []
    for r, g in enumerate(dist.graphs):
        vals = {}
        for n in g.inputs:
            b = bindings.get(n.name)
            if b is None:
                raise RelationError(f"distributed input {n.name!r} (rank {r}) has no relation to a single-device "
                                    f"input; give one in the relations (e.g. {n.name}: Replicate()) or mark it Ignore()")
            if isinstance(b.relation, Ignore):
                t = terms.make("ignored", (n.name, r), (), n.shape)
                vals[n.name] = full(terms, t)
                continue
            if b.seq_name not in seq_vals:
                raise RelationError(f"relation for {n.name!r} names single-device input {b.seq_name!r}, which does "
                                    f"not exist (inputs are: {', '.join(sorted(seq_vals)) or 'none'})")
            sval, sshape = seq_vals[b.seq_name], seq_shapes[b.seq_name]
            if isinstance(b.relation, DERIVED):
                ids = _ids_of(b)
                formula = b.relation.derivation(seq.node(ids).type, n.type, r, dist.world_size)
                vals[n.name] = derive(terms, formula, {"ids": seq_vals[ids]})
                continue
            if isinstance(b.relation, Partial):
                if tuple(n.shape) != tuple(sshape):
                    raise RelationError(f"{n.name!r} is Partial of {b.seq_name!r} but their shapes differ: "
                                        f"{list(n.shape)} vs {list(sshape)}")
                t = terms.make("partial_input", (b.relation.op, r, dist.world_size), (sval.t,), sshape)
                vals[n.name] = full(terms, t)
                continue
            vecs = b.relation.layout(sshape, r, dist.world_size)
            local = tuple(s if v is None else len(v) for s, v in zip(sshape, vecs))
            if local != tuple(n.shape):
                raise RelationError(f"{n.name!r} on rank {r} has shape {list(n.shape)}, but {b.relation} of "
                                    f"{b.seq_name!r} (shape {list(sshape)}) over {dist.world_size} ranks gives "
                                    f"{list(local)}: the shapes cannot match")
            vals[n.name] = Val(sval.t, tuple(vecs))
        per_rank.append(vals)
    return seq_vals, per_rank


def _ids_of(b: InputRelation) -> str:
    """The single-device ids a derived relation is a function of."""
    return getattr(b.relation, "ids", None) or b.seq_name


def _whole_range_masks(bindings: dict[str, InputRelation]) -> set[str]:
    """Single-device masks that an OutsideBlock relation says cover the whole range of
    valid ids (a group of one): they are all false."""
    return {b.seq_name for b in bindings.values() if isinstance(b.relation, OutsideBlock) and _ids_of(b) != b.seq_name}


def numeric_inputs(seq: Graph, dist: DistributedProgram, bindings: dict[str, InputRelation],
                   examples: dict | None, seed: int = 0, fractional: bool = False):
    """Single-device inputs (examples, else small integers) and each rank's inputs derived
    through the relations, so both programs see corresponding values. With `fractional`,
    float inputs without an example are multiples of 1/1024 (still exact in binary), so that
    truncating casts and roundings show what they drop."""
    rng = np.random.default_rng(seed)
    denom = 1024.0 if fractional else 1.0
    seq_in = {}
    for n in seq.inputs:
        if examples and n.name in examples:
            seq_in[n.name] = np.asarray(examples[n.name])
        elif n.type.dtype.startswith(("i", "u", "b")) or n.type.dtype in ("bool",):
            seq_in[n.name] = rng.integers(0, 2, size=n.shape)
        else:
            seq_in[n.name] = rng.integers(-2 * int(denom), 2 * int(denom) + 1, size=n.shape) / denom
    for b in bindings.values():  # ids of a derived relation range over all blocks
        if isinstance(b.relation, DERIVED) and not (examples and _ids_of(b) in examples):
            seq_in[_ids_of(b)] = rng.integers(0, b.relation.size, size=seq_in[_ids_of(b)].shape)
    for name in _whole_range_masks(bindings):
        seq_in[name] = np.zeros(seq_in[name].shape, dtype=bool)
    per_rank = []
    partial_splits: dict[str, list] = {}
    for r, g in enumerate(dist.graphs):
        vals = {}
        for n in g.inputs:
            b = bindings[n.name]
            if isinstance(b.relation, Ignore):
                vals[n.name] = rng.integers(-2, 3, size=n.shape).astype(np.float64)
            elif isinstance(b.relation, DERIVED):
                formula = b.relation.derivation(seq.node(_ids_of(b)).type, n.type, r, dist.world_size)
                vals[n.name] = derive_numeric(formula, {"ids": seq_in[_ids_of(b)]})
            elif isinstance(b.relation, Partial):
                if n.name not in partial_splits:
                    x = seq_in[b.seq_name].astype(np.float64)
                    parts = [rng.integers(-2, 3, size=x.shape).astype(np.float64) for _ in range(dist.world_size - 1)]
                    whole = x * (dist.world_size if b.relation.op == "avg" else 1)
                    partial_splits[n.name] = parts + [whole - sum(parts)]
                vals[n.name] = partial_splits[n.name][r]
            else:
                x = seq_in[b.seq_name]
                vals[n.name] = held(x, b.relation.layout(x.shape, r, dist.world_size))
        per_rank.append(vals)
    return seq_in, per_rank


# ---------------------------------------------------------------- verification

def op_assumptions(graphs) -> list[str]:
    """Conventions that rules of the ops these programs use rely on (stated by the ops)."""
    from ..ops.registry import lookup
    seen = []
    for g in graphs:
        for n in g.nodes:
            opdef = lookup(n.op) if n.op not in ("input", "constant") else None
            if opdef is not None and opdef.assumes and opdef.assumes not in seen:
                seen.append(opdef.assumes)
    return seen


def verify_graphs(seq: Graph, dist: DistributedProgram, bindings: dict[str, InputRelation],
                  expect: dict[str, Relation | None] | None = None, examples: dict | None = None,
                  name: str = "", views: bool = False, progress=None, gradients: frozenset = frozenset()) -> Report:
    """The verdict on `dist` against `seq`; with `views`, the report also carries every
    node's relation (``report.graphs``, for the HTML page). `progress(stage, done, total)`
    hears of each of ENGINE_STAGES as it starts. `gradients` names the outputs that are
    parameter gradients or updated parameters (a training step): a partial sum found only
    on their way is a missing gradient reduction."""
    t0 = time.perf_counter()

    def stage(i: int) -> None:
        if progress is not None:
            progress(ENGINE_STAGES[i], i, len(ENGINE_STAGES))
    stage(0)
    world = dist.world_size
    terms = TermStore()
    seq_in, dist_in = _input_vals(terms, seq, dist, bindings)
    run = interpret(seq, dist, seq_in, dist_in, terms)
    relater = Relater(terms, seq, run.seq)
    report = Report("unknown", world, assumptions=list(ASSUMPTIONS) + op_assumptions([seq] + dist.graphs), name=name,
                    relations={k: {"relation": str(b.relation), "of": b.seq_name, "how": b.how}
                               for k, b in bindings.items()})
    report.stats = {"nodes_seq": len(seq.nodes), "nodes_dist": sum(len(g.nodes) for g in dist.graphs),
                    "terms": len(terms.terms)}
    expect = expect or {}
    stage(1)
    checks, broken = _check_outputs(run, relater, seq, dist, expect)
    report.outputs = checks

    def finish(status: str, **kw) -> Report:
        report.status = status
        for k, v in kw.items():
            setattr(report, k, v)
        if views:
            from .views import graph_views
            report.graphs = graph_views(run, seq, dist, _status(run, relater, dist), report.findings)
        report.stats["seconds"] = round(time.perf_counter() - t0, 4)
        return report

    if run.mismatch is not None:
        m = run.mismatch
        n = m.nodes[0]
        report.findings.append(Finding(m.kind, m.ranks, n.name, n.op, _src(n), "matching collectives",
                                       "mismatched", m.message, m.hint))
        return finish("violation")
    if run.unsupported:
        u = run.unsupported[0]
        where = "single-device program" if u.rank is None else f"rank {u.rank}"
        at = [str(s) for s in (u.node.origin, u.node.source) if s]
        return finish("unknown", reason=f"{u.reason} at node {u.node.name} ({', '.join([where] + at)}); "
                                        f"the engine cannot reason past it")
    breaches = input_breaches(seq, examples)
    if not broken and not breaches:
        return finish("verified", strength="proof")
    if breaches:  # a proof that relied on them proves nothing: every output rests on the numeric evidence
        broken = list(dict.fromkeys(broken + [c.name for c in checks]))
        report.assumptions = report.assumptions + [f"NOT MET by the example inputs: {b}" for b in breaches]
    breached = f"; {breaches[0]}, so the rules' proof does not hold for them" if breaches else ""

    # The rules did not prove it: look for numeric evidence of a real difference.
    stage(2)
    try:
        differing, (s_in, s_env, d_envs) = differing_outputs(seq, dist, bindings, expect, examples, broken)
    except Exception as exc:  # numerics unavailable (too large, unknown constants): evidence at the broken op
        stage(3)
        first = _localize(run, relater, seq, dist, broken)
        finding = _local_finding(run, relater, seq, dist, broken, expect, first)
        if finding is not None:
            return finish("violation", findings=[finding], strength="local",
                          reason=f"the programs cannot be evaluated end to end ({exc}); the counterexample is "
                                 f"local: the op's inputs are proven to hold the single-device values shown")
        where = f"; relations stop at node {first.node.name} (op {first.node.op})" if first else ""
        return finish("unknown", reason=f"no proof for output(s) {', '.join(broken)}{where}{breached}, and no "
                                        f"numeric evidence of a difference ({exc})")
    if not differing:
        first = _localize(run, relater, seq, dist, broken)
        where = f" (relations stop at node {first.node.name}, op {first.node.op})" if first else ""
        if breaches:
            return finish("unknown", reason=f"not verified: {breaches[0]}, so the rules' proof does not hold for "
                                            f"them; a numeric test on the example inputs shows no difference")
        return finish("unknown", reason=f"could not prove output(s) {', '.join(broken)}{where}; a numeric test on "
                                        f"random inputs shows no difference, so this may be a missing lemma")
    stage(3)
    report.findings = _findings(run, relater, seq, dist, differing, s_in, s_env, d_envs, gradients)
    return finish("violation")


PARTIAL_KINDS = ("partial-sum-never-reduced", "nonlinearity-on-partial")


def _refine(finding: Finding, dist: DistributedProgram, status: list, gradients: frozenset) -> Finding:
    """Name the bug class from what the broken tensor feeds: a partial sum plus a term every
    rank holds whole, summed by an all_reduce later, counts that term once per rank; a
    partial sum used where only gradients (or the updates made of them) depend on it is a
    gradient reduction that is missing or comes too late -- so is a share of a reduction
    (one data-parallel group's rows of a gradient sum, a partial sum over part of the mesh)
    used as the whole there."""
    g = dist.graphs[finding.rank[0]]
    if not g.has(finding.node):
        return finding
    kinds = {rel.kind for rel in (status[finding.rank[0]].get(x) for x in g.node(finding.node).inputs) if rel}
    share_used = finding.kind == "value-mismatch" and "piece" in kinds
    if finding.kind not in PARTIAL_KINDS and not share_used:
        return finding
    users = g.users()
    reached = _reach([g.node(finding.node)], lambda m: users[m])
    summed_later = [n for n in reached if n.op == "_c10d_functional.all_reduce" and n.args[1] in ("sum", "avg")
                    and completes(n)]
    if not share_used and finding.op in ("aten.add", "aten.sub") and {"partial", "held"} <= kinds and summed_later:
        finding.kind = "replicated-counted-per-rank"
        finding.hint = (f"this adds a term every rank holds whole to a partial sum, and the all_reduce at "
                        f"{summed_later[0].name} then counts that term once per rank: add it on one rank only, or "
                        f"after the reduction" + (f" ({finding.source})" if finding.source else ""))
        return finding
    outputs = {name for name, n in g.outputs.items() if n in reached}
    if gradients and outputs and outputs <= gradients:
        finding.kind = "missing-gradient-reduction"
        origin = partial_origin(g.node(finding.node), status[finding.rank[0]]) \
            if autograd_accumulation(g.node(finding.node)) else None
        if origin is not None:  # a gradient accumulation (no forward line): blame the backward op of the share
            prefix, finding.hint = gradient_accumulation_blame(origin)
            finding.message = f"{prefix}; {finding.message}"
            finding.node, finding.op, finding.source = origin.name, origin.op, _src(origin)
            finding.expected, finding.counterpart = f"all_reduce(sum) of {origin.name} over the group", None
            return finding
        finding.hint = ("gradients (or a norm of them) are used while still partial sums over the ranks: all_reduce(sum) "
                        "them over the group that holds the pieces before this op -- for an activation's gradient, the "
                        "tensor-parallel group in the backward (Megatron's f operator, where the activation enters the "
                        "tensor-parallel layers, all-reduces its gradient in its backward); for parameters' gradients, "
                        "the data-parallel group in the step" + (f" (at {finding.source})" if finding.source else ""))
    return finding


def differing_outputs(seq: Graph, dist: DistributedProgram, bindings: dict[str, InputRelation],
                      expect: dict | None = None, examples: dict | None = None, names=None, seed: int = 0):
    """Outputs whose distributed values do not relate to the single-device values as
    expected, on a numeric instance (evidence, never proof); also returns the instance.
    Integer-valued floats first; where they show no difference, multiples of 1/1024 (a truncating
    cast or a rounding is the identity on integers)."""
    check_evaluable(seq, dist)
    expect = expect or {}
    names = list(seq.outputs) if names is None else names
    for fractional in (False, True):
        s_in, d_in = numeric_inputs(seq, dist, bindings, examples, seed, fractional)
        s_env, d_envs = evaluate(seq, dist, s_in, d_in)
        differing = [o for o in names if _output_differs(seq, dist, o, expect.get(o), s_env, d_envs)]
        if differing:
            break
    return differing, (s_in, s_env, d_envs)


def _src(node: Node) -> str | None:
    return str(node.source) if node.source else None


def _output_nodes(seq: Graph, dist: DistributedProgram):
    for name, snode in seq.outputs.items():
        dnodes = [g.outputs.get(name) for g in dist.graphs]
        yield name, snode, dnodes


def _check_outputs(run: SymbolicRun, relater: Relater, seq: Graph, dist: DistributedProgram, expect: dict):
    checks, broken = [], []
    world = dist.world_size
    for name, snode, dnodes in _output_nodes(seq, dist):
        exp = expect.get(name)
        exp_s = str(exp) if exp is not None else "recoverable (Replicate, Shard, Slices or Partial)"
        holds = None
        if all(d is not None for d in dnodes) and run.mismatch is None:
            dvals = [run.dist[r].get(d) for r, d in enumerate(dnodes)]
            sval = run.seq.get(snode)
            holds = _relation_holding(run.terms, relater, snode, sval, dvals, exp, world)
        checks.append(OutputCheck(name, exp_s, holds))
        if holds is None:
            broken.append(name)
    return checks, broken


def _relation_holding(terms, relater, snode, sval, dvals, exp, world) -> Optional[str]:
    if not isinstance(sval, Val) or not all(isinstance(v, Val) for v in dvals):
        return None
    if isinstance(exp, Partial) or exp is None:
        same = all(v.same(dvals[0]) for v in dvals)
        if not same:
            p = relater.partial(dvals)
            completes = p is not None and (p.seq_node is snode or any(  # the output, or a node of its value
                node is p.seq_node and v.same(sval) for node, v in relater.by_term.get(sval.t, ())))
            if completes and (exp is None or exp.op == p.partial):
                return f'Partial("{p.partial}")'
        if isinstance(exp, Partial):
            return None
    if isinstance(exp, Shard) and _shards_assemble(terms, sval, dvals, exp, world):
        return str(exp)
    per_rank = []
    for v in dvals:
        if v.t != sval.t:
            return None
        pos = positions_in(terms, sval, v)
        if pos is None:
            return None
        per_rank.append(pos)
    shape = tuple(terms.shape(sval.t)[d] if sval.vecs[d] is None else len(sval.vecs[d]) for d in range(len(sval.vecs)))
    if exp is None:
        if not all(in_order(pos) for pos in per_rank):
            return None  # every element is there, but permuted: no layout a user means unless stated
        covered = np.zeros(shape, dtype=bool) if np.prod(shape) <= 1 << 24 else None
        if covered is not None:
            for pos in per_rank:
                covered[layout_index(shape, pos)] = True
            if not covered.all():
                return None
        return summarize(per_rank, shape, world)
    for r, pos in enumerate(per_rank):
        want = exp.layout(shape, r, world)
        if want is None:
            return None
        for p, w, s in zip(pos, want, shape):
            if not np.array_equal(np.arange(s) if p is None else p, np.arange(s) if w is None else w):
                return None
    return str(exp)


def _shards_assemble(terms, sval: Val, dvals: list, exp: Shard, world: int) -> bool:
    """The ranks' values, as torch.chunk's blocks along the dim, concatenate to the
    single-device value (ranks that compute their blocks differently: a subgroup's
    members and the others)."""
    from ..algebra.layout import concat, shape_of
    from ..relations.spec import chunk_bounds
    shape = shape_of(terms, sval)
    d = exp.dim % len(shape)
    for r, v in enumerate(dvals):
        lo, hi = chunk_bounds(shape[d], world, r)
        want = shape[:d] + (hi - lo,) + shape[d + 1:]
        if tuple(shape_of(terms, v)) != tuple(want):
            return False
    try:
        return concat(terms, [v for v in dvals if shape_of(terms, v)[d]], d).same(sval)
    except Exception:  # pieces the algebra cannot concatenate: no proof this way
        return False


def _local_piece(s_val: np.ndarray, rel: Relation, rank: int, world: int) -> np.ndarray:
    return held(s_val, rel.layout(s_val.shape, rank, world))


def _close(a, b) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    both_nan = np.isnan(a) & np.isnan(b)
    return bool(np.all(both_nan | np.isclose(a, b, rtol=1e-9, atol=1e-9)))


def _output_differs(seq, dist, name, exp, s_env, d_envs, close=_close) -> bool:
    """Whether output `name`'s distributed values fail `exp` (None: any recoverable layout)
    against the single-device value, elementwise by `close(distributed, single)`."""
    snode = seq.outputs[name]
    s_val = np.asarray(s_env[snode], dtype=np.float64)
    dnodes = [g.outputs.get(name) for g in dist.graphs]
    if any(d is None or d not in d_envs[r] for r, d in enumerate(dnodes)):
        return True
    vals = [np.asarray(d_envs[r][d], dtype=np.float64) for r, d in enumerate(dnodes)]
    if isinstance(exp, Partial) or (exp is None and all(v.shape == s_val.shape for v in vals)
                                    and not all(close(v, s_val) for v in vals)):
        total = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}[exp.op if exp else "sum"](np.stack(vals), 0)
        if close(total, s_val):
            return False
        if isinstance(exp, Partial):
            return True
    if exp is None and all(v.shape == s_val.shape for v in vals):
        return not all(close(v, s_val) for v in vals)
    if exp is None:  # any layout the ranks' pieces form (Shard of any dim, Slices, Interleaved)
        if any(all(close(v, _local_piece(s_val, Shard(d), r, len(vals))) for r, v in enumerate(vals))
               for d in range(s_val.ndim)):
            return False
        digits = lambda x: np.round(x, 7) + 0.0  # noqa: E731  (rounding noise must not hide a match)
        return relation_by_value(digits(s_val), [digits(v) for v in vals]) is None
    return not all(close(v, _local_piece(s_val, exp, r, dist.world_size)) for r, v in enumerate(vals))


output_differs = _output_differs  # the execution confirmation compares under the same semantics


# ---------------------------------------------------------------- localization

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


LOCAL_PIECES = {"lookup_in", "range_lookup"}  # lemma forms: a rank's piece of a sum over ranks


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


@dataclass
class Localized:
    """Where a violation is reported (`node`, on `ranks`) and the first tensor whose
    relation breaks (`broken`, where the evidence is); they differ when an earlier op is
    to blame (`blame` says why)."""
    node: Node
    ranks: list
    status: list
    broken: Node
    blame: Optional[str] = None
    recovers: bool = False  # a later tensor relates again: `broken` may be a legitimate intermediate
    blamed_as: tuple = ("wrong-shard-offset", "each rank's own chunk (the pieces tile the dim)",
                        "overlapping pieces", "cut each rank's piece at its own offset (rank r: the r-th chunk)")
    """(kind, expected, actual, hint) of a finding at `node` when `blame` is set."""
    counterpart: Optional[str] = None  # with `blame`: the single-device tensor `node` relates to, if any


def _diagonal(pairs: bytes) -> bool:
    """Whether a contraction's index pairs (i, j) all have i == j (distinct, so a subset)."""
    p = np.frombuffer(pairs, dtype=np.int64).reshape(-1, 2)
    return bool(np.all(p[:, 0] == p[:, 1])) and len(np.unique(p[:, 0])) == len(p)


def _collective(node: Node) -> bool:
    return node.op.startswith("_c10d_functional.") and node.op != "_c10d_functional.wait_tensor"


def _rescales(node: Node, rel: Optional[Related], input_rels: list) -> bool:
    """Whether `node` multiplies or divides a multiple of a value by a constant, changing
    its factor (an average's division, a micro-batch rescaling)."""
    return rel is not None and rel.kind == "scaled" and node.op in ("aten.mul", "aten.div") \
        and len(input_rels) == 1 and input_rels[0].factor != rel.factor


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


def _localize(run: SymbolicRun, relater: Relater, seq: Graph, dist: DistributedProgram, broken: list[str]):
    """The first distributed tensors (with their ranks) whose relation breaks."""
    status = _status(run, relater, dist)
    found: dict[str, tuple[Node, list[int], bool, tuple[int, int]]] = {}  # name -> (node, ranks, recovers, (epoch, i))
    # a tensor every rank relates exactly to the single-device program (not a constant: one
    # rank's offset may be 0; its elements in order): where a legitimate rank-local
    # intermediate's dataflow relates again
    names = set.intersection(*({n.name for n, rel in st.items()
                                if rel is not None and rel.kind not in ("const", "local", "scaled", "piece", "packed")
                                and in_order(rel.positions)} for st in status))
    rescalings = []
    for r, g in enumerate(dist.graphs):
        users = g.users()
        targets = [g.outputs[o] for o in broken if o in g.outputs]
        ancestors = _reach(targets, lambda n: list(n.inputs))
        epoch = 0  # collectives so far: the k-th synchronizes the ranks, so order across ranks by it first
        for i, n in enumerate(g.nodes):
            epoch += _collective(n)
            rel = status[r].get(n)
            if n not in status[r] or n not in ancestors:
                continue
            if rel is not None and rel.exact and not (rel.kind == "piece" and _collective(n)) \
                    and not reorders(n, rel, status[r]):
                continue  # related; a collective that leaves a mere share of a reduction is suspect
            input_rels = [status[r].get(x) for x in _operands(n, status[r])]
            if not all(x is not None for x in input_rels):
                continue
            if not all(x.exact for x in input_rels):
                # from a multiple of a value: only a re-scaling the single-device program does not do
                if not _rescales(n, rel, input_rels) or _seq_counterpart(run.seq, n, [status[r].get(x) for x in n.inputs]) is not None:
                    continue
                rescalings.append((r, n.name))
            recovers = any(d.name in names for d in _reach([n], lambda m: _dataflow_users(users, status[r], m))
                           if d is not n)
            key = n.name
            if key in found:
                found[key][1].append(r)
            else:
                found[key] = (n, [r], recovers, (epoch, i))
    for r, m in rescalings:  # a multiple re-scaled wrongly later: blame the re-scaling, not where it began
        g = dist.graphs[r]
        users = g.users()
        for name, f in list(found.items()):
            if name != m and not f[2] and g.has(name) and g.node(m) in _reach([g.node(name)], lambda x: users[x]):
                del found[name]
    misrouted = None if found else _misrouted_output(run, relater, seq, dist, broken, status)
    if misrouted is not None:
        return misrouted
    if min((f[2] for f in found.values()), default=True):
        # every unrelated tensor relates again later: the break is an output held wrongly
        wrong = _related_wrongly(dist, status, broken)
        if wrong is not None:
            reordering = next(((f[0], f[1]) for f in sorted(found.values(), key=lambda f: f[3])
                               if _feeds_out_of_order(f[0], dist.graphs[f[1][0]].users(), status[f[1][0]])), wrong)
            return Localized(reordering[0], reordering[1], status, reordering[0], recovers=False)
    if not found:
        return None
    n, ranks, recovers, _ = min(found.values(), key=lambda f: (f[2], f[3]))
    culprit = _misaligned_slice(n, status[ranks[0]])
    if culprit is not None:
        return Localized(culprit, ranks, status, culprit, recovers=recovers)
    misrouted = _misrouted_operand(run, relater, seq, dist, n, ranks[0], status[ranks[0]])
    if misrouted is not None:
        culprit, why = misrouted
        return Localized(culprit, ranks, status, n, why, recovers,
                         ("wrong-shard-offset", "the elements the single-device program's op takes", "other elements",
                          "take the same elements as the single-device program (check the offsets)"))
    overlapping = _overlapping_slice(dist, status, _reach([n], lambda m: list(m.inputs)))
    if overlapping is not None:
        return Localized(*overlapping[:2], status, n, overlapping[2], recovers)
    view = misshaped_view(n, _operands(n, status[ranks[0]]), status[ranks[0]], run.seq)
    if view is not None:  # the op reads a view sized unlike the single-device one: blame the view
        blame, blamed_as, counterpart = view_blame(*view)
        return Localized(view[0], ranks, status, n, blame, recovers, blamed_as, counterpart)
    return Localized(n, ranks, status, n, recovers=recovers)


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


def _dataflow_users(users: dict, status: dict, node: Node) -> list:
    """The users of `node` whose values depend on its value: a constant made from it (a
    ``ones_like`` seeding the backward) takes only its shape, so no dataflow passes there."""
    return [u for u in users[node] if status.get(u) is None or status[u].kind != "const"]


def _operands(node: Node, status: dict) -> list[Node]:
    """`node`'s tensor inputs; for one output of a multi-output op (a getitem), that op's:
    the op, not the selection of its output, is what may break a relation."""
    inputs = list(node.inputs)
    if node.op == "getitem" and len(inputs) == 1 and inputs[0] not in status:
        inputs = list(inputs[0].inputs)
    return [x for x in inputs if x in status]


def _feeds_out_of_order(node: Node, users: dict, status: dict) -> bool:
    """Whether the first related tensors `node` feeds (past unrelated ones) hold their
    single-device elements out of order: `node` scrambled a layout (a collective gathering
    along the wrong dim) that a later view made relate again, permuted."""
    stack, seen = list(users[node]), set()
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        rel = status.get(m)
        if rel is None:
            stack.extend(users[m])
        elif rel.kind == "held" and not in_order(rel.positions):
            return True
    return False


def _related_wrongly(dist: DistributedProgram, status: list, broken: list[str]):
    """The first broken output that every rank holds in *some* relation (not the one
    expected, e.g. a partial sum never reduced), with its ranks; else None."""
    for o in broken:
        nodes = [g.outputs.get(o) for g in dist.graphs]
        if all(n is not None and status[r].get(n) is not None for r, n in enumerate(nodes)):
            node = nodes[0]
            while node.op in ("aten.alias", "aten.detach") and node.args and isinstance(node.args[0], Node):
                node = node.args[0]  # name the op that produced it
            return node, list(range(len(nodes)))
    return None


def _holds_inside(terms, env: dict, senv: dict):
    """``inside(x, s)``: whether distributed node x holds elements of single-device node s."""
    def inside(x: Node, s: Node) -> bool:
        dv, sv = env.get(x), senv.get(s)
        return isinstance(dv, Val) and isinstance(sv, Val) and dv.t == sv.t and positions_in(terms, sv, dv) is not None
    return inside


def _misrouted_operand(run: SymbolicRun, relater: Relater, seq: Graph, dist: DistributedProgram, node: Node,
                       rank: int, status: dict):
    """An op whose operands all relate to the single-device program, but one of them to
    another tensor than the single-device op reads (a key projection cut from the query
    columns): walk that operand back in step with the single-device program's operand,
    op by op, to the first op that reads what its counterpart reads and yields other
    elements. Returns (that node, why) or None."""
    inside = _holds_inside(relater.terms, run.dist[rank], run.seq)
    operands = [x for x in node.inputs if x in status]
    if not operands or any(status[x] is None for x in operands):
        return None
    best, score = None, 0
    for s in seq.nodes:  # the single-device op of the same kind reading most of the same operands
        if s.op != node.op or len(list(s.inputs)) != len(list(node.inputs)):
            continue
        hits = sum(inside(x, y) for x, y in zip(node.inputs, s.inputs))
        if hits > score:
            best, score = s, hits
    if best is None or score == len(list(node.inputs)):
        return None
    x, s = next((x, y) for x, y in zip(node.inputs, best.inputs) if not inside(x, y))
    return _walk_back(run, relater, dist, rank, status, x, s)


def _walk_back(run: SymbolicRun, relater: Relater, dist: DistributedProgram, rank: int, status: dict, x: Node,
               s: Node):
    """From a distributed tensor `x` holding elements of another single-device tensor than
    its counterpart `s`, back through the ops both programs apply alike, to the first op
    whose inputs hold what its counterpart's inputs hold: (that node, why), or None."""
    env, senv = run.dist[rank], run.seq
    terms = relater.terms
    inside = _holds_inside(terms, env, senv)
    for _ in range(len(dist.graphs[rank].nodes)):
        held_elsewhere = status.get(x) is not None and status[x].kind in ("held", "view")  # of another tensor
        if not held_elsewhere or x.op != s.op or x.op in ("input", "constant"):
            return None
        pairs = list(zip(x.inputs, s.inputs))
        if len(pairs) != len(list(x.inputs)) or len(pairs) != len(list(s.inputs)):
            return None
        off = [(a, b) for a, b in pairs if not inside(a, b)]
        if not off:
            return x, _takes_other(terms, env, senv, x, s, pairs)
        x, s = off[0]
    return None


def _misrouted_output(run, relater, seq, dist, broken: list[str], status: list):
    """An output that holds elements of another single-device tensor than the expected
    one (every tensor on the way relates to something): blame the first op that took them."""
    for name in broken:
        for r, g in enumerate(dist.graphs):
            x, s = g.outputs.get(name), seq.outputs.get(name)
            if x is None or s is None:
                continue
            while x.op == s.op and x.op in ("aten.alias", "getitem") and x.args and isinstance(x.args[0], Node):
                x, s = x.args[0], s.args[0]
            misrouted = _walk_back(run, relater, dist, r, status[r], x, s)
            if misrouted is not None:
                ranks = [q for q, h in enumerate(dist.graphs) if status[q].get(h.outputs.get(name)) is not None]
                node, why = misrouted
                return Localized(node, ranks or [r], status, g.outputs[name], why, False,
                                 ("wrong-shard-offset", "the elements the single-device program's op takes",
                                  "other elements", "take the same elements as the single-device program "
                                                    "(check the offsets)"))
    return None


def _takes_other(terms, env, senv, x: Node, s: Node, pairs) -> str:
    """Which elements of its input `x` takes on this rank, against what `s` takes."""
    a, b = pairs[0]
    got = positions_in(terms, senv[b], env[x]) if isinstance(env.get(x), Val) else None
    want = positions_in(terms, senv[b], senv[s]) if isinstance(senv.get(s), Val) else None
    parts = []
    if got is not None and want is not None:
        for d, (g, w) in enumerate(zip(got, want)):
            if g is None and w is None or (g is not None and w is not None and np.array_equal(g, w)):
                continue
            size = b.shape[d]
            parts.append(f"dim {d}: it takes {_span(np.arange(size) if g is None else g)} of {b.name} where the "
                         f"single-device {s.name} takes {_span(np.arange(size) if w is None else w)}")
    detail = "; ".join(parts) or "other elements than the single-device op"
    return f"it reads the same tensor as the single-device {s.name} but {detail}"


def _misaligned_slice(node: Node, status: dict) -> Optional[Node]:
    """An elementwise op whose operands are each related, but at different positions on
    an aligned dim: the operand cut by a slicing op is at the wrong offset (e.g. one
    rank slicing a replicated RoPE table from the wrong start)."""
    from ..ops.common import elementwise_shape
    from ..ops.registry import lookup
    opdef = lookup(node.op)
    if opdef is None or opdef.shape is not elementwise_shape:
        return None
    rels = [(x, status.get(x)) for x in node.inputs]
    rels = [(x, r) for x, r in rels if r is not None and r.positions is not None and r.kind == "held"]
    for a, ra in rels:
        for b, rb in rels:
            if a is b or b.op not in SLICING_OPS:
                continue
            for pa, pb in zip(reversed(ra.positions), reversed(rb.positions)):
                if pa is not None and pb is not None and len(pa) == len(pb) and not np.array_equal(pa, pb):
                    return b
                if (pa is None) != (pb is None) and a.op not in SLICING_OPS:
                    return b
    return None


def _overlapping_slice(dist: DistributedProgram, status: list, ancestors: set):
    """A slicing op whose pieces overlap across ranks where they should tile the dim (a
    sequence-parallel scatter cut at the wrong offset on one rank): the pieces of a
    replicated tensor either repeat the same rows everywhere or partition them. Blames
    the ranks whose piece is not its chunk."""
    names = {n.name for n in ancestors}
    for n in dist.graphs[0].nodes:
        if n.op not in SLICING_OPS or n.name not in names or not all(g.has(n.name) for g in dist.graphs):
            continue
        rels = [status[q].get(g.node(n.name)) for q, g in enumerate(dist.graphs)]
        if any(rel is None or rel.positions is None or rel.kind != "held" for rel in rels):
            continue
        dims = {d for rel in rels for d, p in enumerate(rel.positions) if p is not None}
        if len(dims) != 1:
            continue
        d = dims.pop()
        size = rels[0].seq_node.shape[d]
        pieces = [np.arange(size) if rel.positions[d] is None else rel.positions[d] for rel in rels]
        allpos = np.concatenate(pieces)
        if len(np.unique(allpos)) == len(allpos) or all(np.array_equal(p, pieces[0]) for p in pieces):
            continue
        world = dist.world_size
        bad = [q for q, p in enumerate(pieces) if not np.array_equal(p, np.arange(*chunk_bounds(size, world, q)))]
        bad = bad or list(range(world))
        spans = "; ".join(f"rank {q} takes {_span(pieces[q])}, its chunk is "
                          f"{_span(np.arange(*chunk_bounds(size, world, q)))}" for q in bad)
        return (dist.graphs[bad[0]].node(n.name), bad,
                f"the ranks' pieces of dim {d} of {rels[0].seq_node.name} overlap instead of tiling it ({spans})")
    return None


def _span(p: np.ndarray) -> str:
    contiguous = len(p) and np.array_equal(p, np.arange(p[0], p[0] + len(p)))
    return f"[{p[0]}:{p[0] + len(p)})" if contiguous else f"{len(p)} positions"
    return None


def _reach(starts, step) -> set:
    seen, stack = set(), list(starts)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(step(n))
    return seen


def _local_finding(run, relater, seq, dist, broken: list[str], expect: dict,
                   loc: Optional[Localized]) -> Optional[Finding]:
    """A finding backed by local evidence (see ``engine.local``): at the first broken
    tensor (`loc`), or at an output proven to hold another relation than the expected one
    (a partial sum where a replicated value was expected)."""
    from .diagnose import diagnose
    from .local import local_instance
    candidates = []
    status = loc.status if loc is not None else _status(run, relater, dist)
    if loc is not None and not loc.recovers:  # evidence only where the difference reaches the outputs
        ranks = loc.ranks if loc.blame is None else list(range(dist.world_size))
        ranks = [r for r in ranks if dist.graphs[r].has(loc.broken.name)] or loc.ranks  # rank-dependent code
        candidates.append((Localized(loc.broken, ranks, status, loc.broken), None, loc))
    for name in broken:
        nodes = [g.outputs.get(name) for g in dist.graphs]
        if expect.get(name) is not None and all(n is not None and status[r].get(n) is not None
                                                for r, n in enumerate(nodes)):
            at = Localized(nodes[0], list(range(dist.world_size)), status, nodes[0])
            candidates.append((at, expect[name], at))
    for at, expected, report_at in candidates:
        found = local_instance(run, seq, dist, at.node, at.ranks, status, expected)
        if found is None:
            continue
        finding = diagnose(run, relater, seq, dist, at.node, at.ranks, status, found.inputs, found.s_env,
                           found.d_envs, expected=None if expected is None else str(expected),
                           cex=found.counterexample)
        return _report_at(finding, report_at)
    return None


def _report_at(finding: Finding, loc: Localized) -> Finding:
    """Name the op to blame: the producer of a multi-output op's broken output, or an
    earlier op whose effect the broken tensor shows."""
    node = loc.node
    if loc.blame is not None:
        finding.message = f"{node.name} = {node.op}(...) on rank(s) {', '.join(map(str, loc.ranks))}: {loc.blame}; " \
                          f"the first tensor that shows it is {loc.broken.name}: {finding.message}"
        kind, expected, actual, hint = loc.blamed_as
        finding.kind, finding.rank = kind, loc.ranks
        finding.expected, finding.actual = expected, actual
        finding.hint = hint + (f" at {node.source}" if node.source else "")
        finding.node, finding.op, finding.source = node.name, node.op, _src(node)
        finding.counterpart = loc.counterpart  # the broken tensor's counterpart is not the blamed op's
    _name_producer(finding, node)
    return finding


def _name_producer(finding: Finding, node: Node) -> None:
    if node.op == "getitem" and node.args and isinstance(node.args[0], Node):
        producer = node.args[0]  # one output of a multi-output op: name the op that broke
        finding.node, finding.op, finding.source = producer.name, producer.op, _src(producer) or finding.source


def _findings(run, relater, seq, dist, differing, s_in, s_env, d_envs, gradients=frozenset()) -> list[Finding]:
    from .diagnose import diagnose
    loc = _localize(run, relater, seq, dist, differing)
    if loc is None:
        name = differing[0]
        dnode = dist.graphs[0].outputs.get(name)
        status = _status(run, relater, dist)
        rel = status[0].get(dnode) if dnode is not None else None
        if rel is not None and rel.kind == "partial":  # every tensor relates, the output only as a partial sum
            while dnode.op == "aten.alias" and isinstance(dnode.args[0], Node):
                dnode = dnode.args[0]  # name the op that produced it
            return [Finding("partial-sum-never-reduced", list(range(dist.world_size)), dnode.name, dnode.op,
                            _src(dnode), "recoverable as expected", rel.describe(),
                            f"output {name} ({dnode.name}) holds on each rank a share whose {rel.partial} over the "
                            f"ranks is the single-device {rel.seq_node.name}: no collective combines them",
                            f"all-reduce ({rel.partial}) {dnode.name} across the ranks before it is returned")]
        return [Finding("output-mismatch", list(range(dist.world_size)), dnode.name if dnode else name,
                        dnode.op if dnode else "?", _src(dnode) if dnode else None, "recoverable",
                        "a different relation", f"output {name} does not relate to the single-device output as expected")]
    ranks = loc.ranks if loc.blame is None else list(range(dist.world_size))
    ranks = [r for r in ranks if dist.graphs[r].has(loc.broken.name)] or loc.ranks  # rank-dependent code
    evidence_ranks = [r for r in ranks if loc.status[r].get(dist.graphs[r].node(loc.broken.name)) is None] or ranks
    finding = diagnose(run, relater, seq, dist, loc.broken, evidence_ranks, loc.status, s_in, s_env, d_envs, differing)
    return [_refine(_report_at(finding, loc), dist, loc.status, gradients)]
