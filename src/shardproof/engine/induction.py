"""Induction over a gradient-accumulation loop (issue 16, flat in M): the generic microbatch
is interpreted three times, and the accumulator after the last generic microbatch is
concluded from them instead of interpreting every copy.

What the capture established, before the engine runs: the rank's microbatches ``t .. E``
(``E`` = M-1, or M-2 when the last one differs) ran **one ATen program** in the eager record
of the real loop (same ops, scalars and constants: the rank class's microbatch classes,
frontends/rank_classes.py; a derived loop's records, frontends/microbatches.py). What this
module checks on the graph it proves: microbatches ``t+1 .. E`` are one body position by
position (op, constants, shapes, dtypes), each operand the microbatch's own tensor, the
previous microbatch's at the same position (the accumulators) or a tensor before the loop
(its slice of the batch: checked to move by one constant step). A microbatch whose program
differs (a loss doubled in the last one, ``if mb == 3``, a missing accumulation add) is not
in ``t .. E``: it is interpreted as itself.

The induction (this module): let ``S_k`` be the values of microbatch ``k``'s tensors (term
and layout). The engine interprets microbatches ``0 .. t+2`` as always (base: ``S_t``, and
two steps, ``S_{t+1}``, ``S_{t+2}``), then

- **the step is one affine map**: ``S_t``, ``S_{t+1}``, ``S_{t+2}`` must be one term tree
  that differs only in index vectors (a layout's selected positions, a reduction's or
  contraction's ``over`` positions), and every such vector must move by the *same* affine
  step twice: translated by one difference (the slice's rows move by one microbatch), or
  extended by one block that is the previous block translated by one difference (the
  accumulator's contraction covers one more microbatch's rows). The slices of the batch
  the generic microbatches read must move by one constant step for *all* ``k`` in
  ``t+1 .. E`` (checked on the split's values, all of them).
- **rows treated alike by value** (:func:`alike_by_value`): the one place a rule reads
  values, not terms, is engine/tables.py -- a tensor computed from no input (a row mask,
  row ids built before the loop) is evaluated and, equal to a block of a single-device
  table, *becomes* that block. A body computing from such a slice could then be matched at
  the three checked microbatches and not at a later one (row ids clamped from row 6: a
  step that was proved before this check). So each batch slice computed from no input
  must be equal, element for element, in every generic microbatch ``t+1 .. E`` (checked
  on all of them; rules that read a constant's rows, algebra/softmax_rows.py, are covered
  too); a slice with no value to compare (a view of a split) fails it. Else every
  microbatch is interpreted
  (``stats.microbatch_induction.fallback`` says which slice).
- **the conclusion**: ``S_E`` is that step applied ``E - t - 2`` more times (its terms built
  through the term store, so the algebra's rewrites apply as when built by the rules);
  microbatches ``t+3 .. E`` are not interpreted. An odd last microbatch and the step after
  the loop (the dp all_reduce, clipping, the optimizer) are interpreted on ``S_E`` as
  always, and the outputs are checked against the single-device step -- the end of the
  induction: the accumulated gradient, after the whole loop, *equals* the single-device
  gradient (loss normalisation included: whatever scale the program applies is in the
  terms, nothing is assumed).

Why this is sound, and what it rests on: the body's rules are functions of the body's
operands' terms and layouts (and of the node), so ``S_{k+1} = F(S_k, slice_k)`` for one
``F``. The check at three points establishes that ``F`` acted on this loop's state as the
affine step at ``k = t`` and ``k = t+1``; that it does so for every later ``k`` is the
rules' *translation invariance in the microbatch rows*: a rule reads an index vector only
through set operations (selection, union of disjoint pieces, comparison of positions of two
operands), never through the absolute value of a row -- except where a vector becomes the
whole dimension (then it is canonicalised to "all"), which the extrapolated state is built
for too (``canon_vec``). A rule that reads absolute rows (a mask built from positions) is
input-independent data (engine/tables.py) and is the same tensor in every microbatch, or
differs through the slice -- checked by the progression of the slices (their terms) and
their values (:func:`alike_by_value`). This is a check at
three points plus that stated invariance, not a proof for a symbolic ``m``: where it does
not hold as checked (anything but the affine step), the engine interprets every microbatch
(today's path), and a verdict other than "proved" from the induction is always re-derived
by the full interpretation, so findings, localisation and counterexamples never come from
an extrapolated state. "verified" still needs the confirmation by execution, which runs the
real programs with all M microbatches.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..algebra.layout import Val, canon_vec
from ..ir.graph import DistributedProgram, Graph, Node
from .tables import VARYING

INDUCTION = True  # False: every microbatch interpreted (the bench's baseline)
OP = "shardproof.induction"  # the pseudo-node standing for the microbatches concluded by induction
FIXED = {"const", "input", "partial_input", "ignored", "opaque", "shared_const"}  # terms never moved by a step


class Unfit(Exception):
    """The three states are not one affine step apart (or the induction's precondition fails:
    the message says which)."""


def _generic(cls: dict) -> tuple | None:
    """(M, t, E) of one rank class: the longest run ``t .. E`` of microbatches with one eager
    record (the class's microbatch classes, frontends/rank_classes.py) that ends the loop (E =
    M-1, or M-2 before an odd last one); else the derived loop's generic microbatches
    (frontends/microbatches.py). The graph is checked to repeat one body (:func:`_bodies`)."""
    groups = cls.get("microbatch_classes") or []
    count = 1 + max((m for g in groups for m in g), default=-1)
    for end in (count - 1, count - 2):
        run = next((g for g in groups if end in g), None)
        if run is None or (end == count - 2 and [count - 1] not in groups):
            continue
        t = end
        while t - 1 in run:
            t -= 1
        if end >= t + 3:
            return count, t, end
    lp = cls.get("microbatch_loop")
    if lp is not None and lp["derived"] == list(range(lp["generic"] + 1, lp["derived"][-1] + 1)):
        return lp["microbatches"], lp["generic"], lp["derived"][-1]
    return None


def loop_of(dist: DistributedProgram) -> dict | None:
    """``{"microbatches", "generic", "last"}`` where every rank class has one loop shape with
    at least one generic microbatch after the three checked ones; else None."""
    shapes = {_generic(c) for c in dist.classes or []}
    if len(shapes) != 1 or None in shapes:
        return None
    count, t, last = shapes.pop()
    return {"microbatches": count, "generic": t, "last": last} if last >= t + 3 else None


def _relative(node: Node, k: int, index: dict, positions: dict):
    """The node's call with each operand named relative to microbatch `k`: its own tensor or
    the previous microbatch's by position in the body, a tensor before the loop as such (the
    batch slices are checked apart); None where it reads another microbatch's tensor."""
    def ref(x):
        if isinstance(x, Node):
            where = positions.get(x.name)
            if where is None:
                return ("pre",)
            if where[0] is None and where[1] in (k, k - 1) and x in index:
                return ("self" if where[1] == k else "prev", index[x])
            raise Unfit
        if isinstance(x, (list, tuple)):
            return tuple(ref(v) for v in x)
        if isinstance(x, dict):
            return tuple((key, ref(v)) for key, v in sorted(x.items()))
        return repr(x)
    ty = node.type
    try:
        return (node.op, ref(node.args), ref(node.kwargs),
                repr(ty) if isinstance(ty, tuple) or ty is None else (tuple(ty.shape), ty.dtype))
    except Unfit:
        return None


def _bodies(graph: Graph, lo: int, hi: int) -> dict | None:
    """Microbatch -> its nodes in order, for microbatches lo..hi; None where microbatches
    lo+1..hi are not one body (:func:`_relative`: the same calls, constants and types, each
    reading its own, the previous microbatch's or the loop's outer tensors). Microbatch lo
    may read another program's tensors (its previous microbatch is not generic)."""
    bodies: dict = {k: [] for k in range(lo, hi + 1)}
    for n in graph.nodes:
        where = graph.positions.get(n.name)
        if where is not None and where[0] is None and where[1] in bodies:
            bodies[where[1]].append(n)
    index = {n: p for b in bodies.values() for p, n in enumerate(b)}
    keys = [[_relative(n, k, index, graph.positions) for n in bodies[k]] for k in range(lo + 1, hi + 1)]
    first = [(n.op, getattr(n.type, "shape", None)) for n in bodies[lo]]
    if not first or first != [(n.op, getattr(n.type, "shape", None)) for n in bodies[lo + 1]] \
            or any(None in key or key != keys[0] for key in keys):
        return None
    return bodies


def folded(dist: DistributedProgram, loop: dict):
    """(the program with microbatches generic+3 .. last replaced by one pseudo-node per
    rank, per rank: (the pseudo-node, the checked bodies, the nodes of the last generic
    microbatch read later)); None where a graph does not fit."""
    t, last = loop["generic"], loop["last"]
    graphs, plans = [], []
    for g in dist.graphs:
        if g.events is not None and any(getattr(e, "peer", None) is not None for e in getattr(g.events, "events", ())):
            return None
        bodies = _bodies(g, t, last)
        if bodies is None:
            return None
        skipped = {n for k in range(t + 3, last + 1) for n in bodies[k]}
        kept = [n for n in g.nodes if n not in skipped]
        if any(x in skipped and x not in bodies[last] for n in kept for x in n.inputs):
            return None  # a later op reads a concluded microbatch other than the last: not the loop's shape
        index = {n: p for p, n in enumerate(bodies[last])}
        read = sorted({index[x] for n in kept for x in n.inputs if x in skipped} |
                      {index[n] for n in g.outputs.values() if n in skipped})
        node = Node(f"induction_{t + 3}_{last}", OP)
        at = kept.index(bodies[t + 2][-1]) + 1
        kept.insert(at, node)
        graphs.append(replace(g, nodes=kept))
        slices = _slices(g, bodies, t, last)
        plans.append((node, bodies, read, slices, input_independent(g, [x for per in slices for x in per])))
    return replace(dist, graphs=graphs), plans


def _slices(graph: Graph, bodies: dict, t: int, last: int) -> list[list[Node]]:
    """Per operand of the body that is a tensor before the loop and differs between the
    generic microbatches (their slices of the batch): that tensor in microbatches t+1..last
    (one body, so one operand structure: :func:`_bodies`)."""
    out = []
    for p, n in enumerate(bodies[t + 1]):
        for i, x in enumerate(n.inputs):
            if graph.positions.get(x.name) is not None:  # a microbatch's tensor, not one before the loop
                continue
            per = [list(bodies[k][p].inputs)[i] for k in range(t + 1, last + 1)]
            if any(y is not x for y in per):
                out.append(per)
    return out


def input_independent(graph: Graph, of: list | None = None) -> set:
    """Names of the graph's nodes computed from no input (constants, aranges, sizes): the
    tensors engine/tables.py evaluates and may relate to the single-device program by value.
    `of`: only these nodes and their ancestors are judged (the answer for a node depends on
    its ancestors alone)."""
    out: set = set()
    wanted = None
    if of is not None:
        wanted, stack = set(), list(of)
        while stack:
            n = stack.pop()
            if n not in wanted:
                wanted.add(n)
                stack.extend(n.inputs)
    for n in graph.nodes:
        if wanted is not None and n not in wanted:
            continue
        if n.op != "input" and not any(v in n.op for v in VARYING) and all(x.name in out for x in n.inputs):
            out.add(n.name)
    return out


def alike_by_value(rank: int, slices: list, independent: set, tables, first: int) -> None:
    """The precondition on the values the rules may read by value: each batch slice the
    generic microbatches read that is computed from no input (a row mask or row ids built
    before the loop) must be equal, element for element, in every generic microbatch --
    the rows are then treated alike whatever a value-based match (engine/tables.py) makes
    of them (or a rule reading a constant's rows, algebra/softmax_rows.py), in the concluded
    microbatches as in the checked ones; one the tables did not evaluate (a view of a split)
    is not checked, so it fails too. A slice of an input is related by terms only (its moves
    checked by :func:`steady`). Raises Unfit with why."""
    for per in slices:
        if not any(x.name in independent for x in per):
            continue
        values = [None if tables is None else tables.values.get((rank, x.name)) for x in per]
        for k, (x, v) in enumerate(zip(per, values)):
            if v is None:  # (a view of a split: rules may still read a constant's rows by value, softmax_rows.py)
                raise Unfit(f"rank {rank}: microbatch {first + k}'s slice {x.name} of a tensor built before the loop "
                            f"from no input has no value to check its rows alike by")
            if not np.array_equal(values[0], v, equal_nan=v.dtype.kind == "f"):
                raise Unfit(f"rank {rank}: microbatch {first + k}'s slice {x.name} of a tensor built before the loop "
                            f"from no input differs by value from microbatch {first}'s (its rows are not treated "
                            f"alike; such tensors are related by value, which is not extrapolated)")


def steady(values: list) -> bool:
    """Whether per-microbatch values (the batch slices) move by one affine step from each
    microbatch to the next: the same term, layouts in one arithmetic progression."""
    if not all(isinstance(v, Val) for v in values) or len({v.t for v in values}) != 1:
        return False
    try:
        for x, y, z in zip(values, values[1:], values[2:]):
            for a, b, c in zip(x.vecs, y.vecs, z.vecs):
                if (a is None) != (b is None) or (b is None) != (c is None):
                    return False
                if a is not None:
                    _progression(np.asarray(a), np.asarray(b), np.asarray(c), 0)
    except Unfit:
        return False
    return True


def _progression(x: np.ndarray, y: np.ndarray, z: np.ndarray, steps: int) -> np.ndarray:
    """The vector `steps` affine steps after z, where x -> y -> z is one step twice: a
    translation (each position moves by one shift, or stays), or an extension by a block
    that is the previous block shifted as a whole."""
    if len(x) == len(y) == len(z):
        d = y - x
        if not np.array_equal(z - y, d) or len(set(d.tolist()) - {0}) > 1:  # positions that move, by one shift
            raise Unfit
        return z + steps * d
    grow = len(y) - len(x)
    if grow <= 0 or len(z) - len(y) != grow or not (np.array_equal(y[:len(x)], x) and np.array_equal(z[:len(y)], y)):
        raise Unfit
    b1, b2 = y[len(x):], z[len(y):]
    d = b2 - b1
    if len(set(d.tolist())) != 1:  # the new block is the previous one shifted as a whole
        raise Unfit
    return np.concatenate([z] + [b2 + j * d for j in range(1, steps + 1)])


def _attr(x, y, z, steps: int):
    if isinstance(x, bytes) and isinstance(y, bytes) and isinstance(z, bytes):
        if x == y == z:
            return z
        if len(x) % 8 or len(y) % 8 or len(z) % 8:
            raise Unfit
        arrays = [np.frombuffer(a, dtype=np.int64) for a in (x, y, z)]
        return np.ascontiguousarray(_progression(*arrays, steps)).tobytes()
    if isinstance(x, tuple) and isinstance(y, tuple) and isinstance(z, tuple) and len(x) == len(y) == len(z):
        return tuple(_attr(a, b, c, steps) for a, b, c in zip(x, y, z))
    if type(x) is type(y) is type(z) and _equal(x, y) and _equal(y, z):
        return z
    raise Unfit


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001  (arrays and the like: not an attribute this rule moves)
        return False


class Extrapolator:
    """Builds ``S_E`` from ``S_t``, ``S_{t+1}``, ``S_{t+2}`` (`steps` = E - t - 2)."""

    def __init__(self, terms, steps: int):
        self.terms, self.steps, self.memo = terms, steps, {}

    def term(self, a: int, b: int, c: int) -> int:
        if a == b == c:
            return c
        key = (a, b, c)
        if key not in self.memo:
            ta, tb, tc = self.terms[a], self.terms[b], self.terms[c]
            if not (ta.op == tb.op == tc.op and ta.shape == tb.shape == tc.shape and ta.op not in FIXED
                    and len(ta.children) == len(tb.children) == len(tc.children)):
                raise Unfit  # (a constant's or a leaf's bytes are values, never positions)
            attrs = _attr(ta.attrs, tb.attrs, tc.attrs, self.steps)
            kids = tuple(self.term(*k) for k in zip(ta.children, tb.children, tc.children))
            self.memo[key] = self.terms.make(tc.op, attrs, kids, tc.shape)
        return self.memo[key]

    def value(self, a, b, c):
        if isinstance(a, Val) and isinstance(b, Val) and isinstance(c, Val):
            if not len(a.vecs) == len(b.vecs) == len(c.vecs):
                raise Unfit
            t = self.term(a.t, b.t, c.t)
            shape = self.terms.shape(t)
            vecs = []
            for d, (x, y, z) in enumerate(zip(a.vecs, b.vecs, c.vecs)):
                if x is None and y is None and z is None:
                    vecs.append(None)
                    continue
                if x is None or y is None or z is None:
                    raise Unfit
                v = _progression(np.asarray(x), np.asarray(y), np.asarray(z), self.steps)
                if len(v) and (v.min() < 0 or v.max() >= shape[d]):
                    raise Unfit
                vecs.append(canon_vec(v, shape[d]))
            return Val(t, tuple(vecs))
        if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and isinstance(c, (tuple, list)) \
                and len(a) == len(b) == len(c):
            return type(c)(self.value(*v) for v in zip(a, b, c))
        if isinstance(a, Val) or isinstance(b, Val) or isinstance(c, Val) or not (_equal(a, b) and _equal(b, c)):
            raise Unfit
        return c


def wrapper(terms, plans: list, loop: dict, failures: list):
    """The evaluator wrapper: the pseudo-node of rank r concludes the microbatches it stands
    for (sets the last generic microbatch's values that later ops read); `failures` hears why
    the states did not fit."""
    t, last = loop["generic"], loop["last"]
    extrapolate = Extrapolator(terms, last - t - 2)

    def wrap(evaluate, tables=None):
        def eval_node(rank: int, node: Node, env: dict):
            if node.op != OP:
                return evaluate(rank, node, env)
            _, bodies, read, slices, independent = plans[rank]
            try:
                alike_by_value(rank, slices, independent, tables, t + 1)
                if not all(steady([env[x] for x in per]) for per in slices):
                    raise Unfit
                for p in read:
                    env[bodies[last][p]] = extrapolate.value(*(env[bodies[k][p]] for k in (t, t + 1, t + 2)))
            except Exception as exc:  # noqa: BLE001  (Unfit, or a term the store refuses: every microbatch interpreted)
                failures.append(str(exc) if isinstance(exc, Unfit) and exc.args else
                                f"rank {rank}: the batch slices of microbatches {t + 1}..{last} or the states after "
                                f"microbatches {t}, {t + 1}, {t + 2} are not one affine step apart")
                for p in read:  # opaque: the outputs do not relate, and the engine interprets every microbatch
                    env[bodies[last][p]] = None
            return None
        return eval_node
    return wrap


def interpret_by_induction(seq, dist: DistributedProgram, seq_in, dist_in, terms, interpret):
    """(the symbolic run, the induction's record) where the loop fits, else None. The run's
    environments lack the concluded microbatches' values: only a proof is taken from it."""
    loop = loop_of(dist) if INDUCTION else None
    got = folded(dist, loop) if loop is not None else None
    if got is None:
        return None
    program, plans = got
    failures: list = []
    run = interpret(seq, program, seq_in, dist_in, terms, wrap=wrapper(terms, plans, loop, failures))
    t, last = loop["generic"], loop["last"]
    record = {"microbatches": loop["microbatches"], "checked": [t, t + 1, t + 2],
              "by_induction": list(range(t + 3, last + 1))}
    if failures:
        record["fallback"] = failures[0]
    return run, record
