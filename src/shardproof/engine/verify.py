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
from typing import Optional

import numpy as np

from ..algebra.layout import Val, full, shape_of, view_term
from ..algebra.masks import make_fill
from ..algebra.poly import same_polynomial
from ..algebra.online_softmax import partial_state
from ..algebra.padding import padded_val, real_part, unpadded_positions
from ..algebra.ranks import COMPLETES, combine
from ..algebra.terms import TermStore
from ..ir.graph import DistributedProgram, Graph, Node
from ..relations.infer import InputRelation, relation_by_value
from ..relations.spec import (DERIVED, Ignore, OutsideBlock, Padded, Partial, Relation, RelationError, Shard,
                              held, layout_index)
from .diagnose import _src
from .induction import interpret_by_induction
from .localize import _findings, _local_finding, _localize
from .numeric import check_evaluable, evaluate
from .assumptions import input_breaches
from .next_step import for_breach, for_op, for_unproved, unprinted_constants
from .numeric import derive as derive_numeric
from .positions import name_positions
from .result import Finding, OutputCheck, Report
from .status import VIEW_TERMS, Related, _diagonal, _status, _tensor_vals, in_order, positions_in, summarize
from .symbolic import SymbolicRun, derive, interpret
from .views import graph_views

ASSUMPTIONS = [
    "real arithmetic: floating-point rounding and summation order are not modelled",
    "widening float casts and int -> float32/float64 casts preserve value; narrowing float casts "
    "(to bf16/f16, f64 -> f32) and casts to int or bool are modelled exactly (their rounding is a term)",
    "random ops (dropout) draw the same randomness for corresponding elements",
    "uninitialized (empty) buffers carry no value",
    "class targets and token ids are valid indices, none equal to ignore_index (checked against the example inputs)",
]
ENGINE_STAGES = ("interpreting both programs symbolically", "checking the outputs",
                 "evaluating both programs numerically", "localizing the first divergence")
PIECEWISE = {"div": 2, "lin": 1, "reshape": 1, "permute": 1}  # term ops linear in child 0 (children count)
VARYING_LEAVES = {"input", "ignored", "opaque", "partial_input"}

# ---------------------------------------------------------------- relations of tensors


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
        return best or self._view_of_known(dval.t) or self._padded(dval)

    def _padded(self, dval: Val) -> Optional[Related]:
        """A value with zero padding (or what ops made of it) whose real positions relate."""
        found = real_part(self.terms, dval)
        rel = self.direct(found[0]) if found is not None else None
        return None if rel is None else Related(rel.seq_node, None, kind="padded" if found[1] else "padded-lanes")

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
        if whole is None and isinstance(dval, Val):  # a state of an online softmax over known scores
            state = partial_state(self.terms, dval.t, lambda t: t in self.by_term)
            return None if state is None else Related(self.by_term[state[0]][0][0], None, kind="softmax-state",
                                                      factor=state[1])
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
        elif term.op == "mul" and len(term.children) == 2 and not term.attrs:
            # a rank's share of a reduction (a repeat's backward over its own heads) times a factor
            # shared by the ranks (RoPE's backward), summed with the other shares later; a partial
            # contraction is not carried so: its first product is where a missing reduction shows
            shares = [(c, o) for c, o in (term.children, term.children[::-1]) if terms[c].op == "sum"]
            inner = next(((w, o) for w, o in ((self._whole_of(c), o) for c, o in shares) if w is not None), None)
            whole = None if inner is None else terms.make("mul", (), tuple(sorted(inner)), term.shape)
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
            vals[n.name] = padded_val(terms, sval.t, tuple(vecs), getattr(b.relation, "padding", lambda: 0)())
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
    terms, run, relater, induced = _interpret(seq, dist, bindings, expect or {}, examples, views)
    report = Report("unknown", world, assumptions=list(ASSUMPTIONS) + op_assumptions([seq] + dist.graphs), name=name,
                    relations={k: {"relation": str(b.relation), "of": b.seq_name, "how": b.how}
                               for k, b in bindings.items()})
    report.stats = {"nodes_seq": len(seq.nodes), "nodes_dist": sum(len(g.nodes) for g in dist.graphs),
                    "terms": len(terms.terms)}
    if run.classes:
        report.stats["class_proof"] = run.classes
    if induced is not None:
        report.stats["microbatch_induction"] = induced
    expect = expect or {}
    stage(1)
    checks, broken = _check_outputs(run, relater, seq, dist, expect)
    report.outputs = checks

    def finish(status: str, **kw) -> Report:
        report.status = status
        name_positions(report.findings, dist)
        for k, v in kw.items():
            setattr(report, k, v)
        if views:
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
                                        f"the engine cannot reason past it; {for_op(u.node.op)}")
    breaches = input_breaches(seq, examples)
    if not broken and not breaches:
        return finish("verified", strength="proof")
    if breaches:  # a proof that relied on them proves nothing: every output rests on the numeric evidence
        broken = list(dict.fromkeys(broken + [c.name for c in checks]))
        report.assumptions = report.assumptions + [f"NOT MET by the example inputs: {b}" for b in breaches]
    breached = f"; {breaches[0]}, so the rules' proof does not hold for them" if breaches else ""

    # The rules did not prove it: look for numeric evidence of a real difference.
    stage(2)
    unprinted = unprinted_constants([seq] + dist.graphs)
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
                                        f"numeric evidence of a difference ({exc}); "
                                        f"{for_unproved(first.node.op if first else None, unprinted)}")
    if not differing:
        first = _localize(run, relater, seq, dist, broken)
        where = f" (relations stop at node {first.node.name}, op {first.node.op})" if first else ""
        if breaches:
            return finish("unknown", reason=f"not verified: {breaches[0]}, so the rules' proof does not hold for "
                                            f"them; a numeric test on the example inputs shows no difference; "
                                            f"{for_breach()}")
        return finish("unknown", reason=f"could not prove output(s) {', '.join(broken)}{where}; a numeric test on "
                                        f"random inputs shows no difference, so this may be a missing lemma; "
                                        f"{for_unproved(first.node.op if first else None, unprinted)}")
    stage(3)
    report.findings = _findings(run, relater, seq, dist, differing, s_in, s_env, d_envs, gradients)
    return finish("violation")


def _interpret(seq: Graph, dist: DistributedProgram, bindings: dict, expect: dict, examples, views: bool):
    """(terms, symbolic run, relater, the induction's record or None): a microbatch loop's
    generic microbatches concluded by induction (engine/induction.py) where that proves
    every output; otherwise (and with `views`) every node interpreted, so that findings and
    views never rest on a concluded state."""
    record = None
    if not views:
        terms = TermStore()
        seq_in, dist_in = _input_vals(terms, seq, dist, bindings)
        got = interpret_by_induction(seq, dist, seq_in, dist_in, terms, interpret)
        if got is not None:
            run, record = got
            relater = Relater(terms, seq, run.seq)
            if "fallback" not in record and not run.unsupported and run.mismatch is None \
                    and not _check_outputs(run, relater, seq, dist, expect)[1] and not input_breaches(seq, examples):
                return terms, run, relater, record
            record = {**record, "by_induction": [],
                      "fallback": record.get("fallback") or "the outputs are not proved from the concluded state"}
    terms = TermStore()
    seq_in, dist_in = _input_vals(terms, seq, dist, bindings)
    run = interpret(seq, dist, seq_in, dist_in, terms)
    return terms, run, Relater(terms, seq, run.seq), record


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
    if isinstance(exp, Padded):
        shape = shape_of(terms, sval)
        ok = all(unpadded_positions(terms, sval, dv, exp.layout(shape, r, world)) for r, dv in enumerate(dvals))
        return str(exp) if ok else None
    per_rank = []
    for v in dvals:
        if v.t != sval.t:
            if not same_polynomial(terms, v.t, sval.t):  # one value written another way (algebra/poly.py)
                return None
            v = Val(sval.t, v.vecs)
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

