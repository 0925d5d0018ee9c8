"""Turn the first broken tensor into a finding a user can act on: what was expected,
what holds instead, a concrete counterexample, a bug class and a fix hint."""
from __future__ import annotations

import numpy as np

from ..algebra.layout import Val
from ..ir.graph import Graph, Node
from ..relations.spec import held
from ..ops.registry import lookup, run_numerics
from .causes import SIZED_VIEWS, view_cause, view_hint
from .lockstep import is_collective, resolve
from .result import Finding
from .status import in_order, positions_in, reorders, summarize

LINEAR_OPS = {"aten.add", "aten.sub", "aten.cat", "aten.stack"}
SLICING_OPS = {"aten.slice", "aten.narrow", "aten.select", "aten.index_select", "xla.slice"}
SCATTERING_OPS = {"aten.slice_scatter", "xla.dynamic_update_slice"}
# collectives that move shards along a dim (by their op name in any framework's namespace)
DIM_COLLECTIVES = {"all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
                   "all_to_all_single"}


def _src(node: Node | None) -> str | None:
    return str(node.source) if node is not None and node.source else None


def counterpart_of(seq, node: Node, input_rels: list, seq_env: dict | None = None) -> Node | None:
    """The single-device node computing the same op from the counterparts of the inputs
    (compared by value when the single-device terms are given: views and copies of a
    tensor are the same input)."""
    input_rels = [None if rel is not None and rel.kind == "local" else rel for rel in input_rels]  # no counterpart
    if lookup(node.op) is None or is_collective(node):
        return input_rels[0].seq_node if input_rels and input_rels[0] is not None else None
    want = [rel.seq_node if rel is not None else None for rel in input_rels]
    if not want:
        return None

    def key(x):
        v = seq_env.get(x) if seq_env is not None and x is not None else None
        return getattr(v, "t", x)
    want_keys = [key(w) for w in want]
    for s in seq.nodes:
        if s.op == node.op and [key(x) for x in s.inputs] == want_keys:
            return s
    for s in seq.nodes:
        if s.op == node.op and set(map(key, s.inputs)) == set(want_keys):
            return s
    # The single-device program may fuse differently (addmm for mm + add): take the first
    # tensor of the same rank that reads, or contains, what the inputs correspond to -- only
    # when the inputs are held values, not mere views of an earlier one (then it is no
    # counterpart of the same value, only a guess by position).
    known = {w for w in want if w is not None}
    if node.type is None or isinstance(node.type, tuple) or any(rel is not None and rel.kind == "view"
                                                                for rel in input_rels):
        return None
    tensors = [s for s in seq.nodes if s.op != "input" and s.type is not None and not isinstance(s.type, tuple)
               and len(s.shape) == len(node.shape)]
    readers = [s for s in tensors if known & set(s.inputs)] + [s for s in tensors if s in known]
    same_shape = [s for s in readers if tuple(s.shape) == tuple(node.shape)]
    return (same_shape or readers or [None])[0]


def _window(a: np.ndarray, b: np.ndarray):
    """A small slice around the first differing element (both arrays of equal shape)."""
    diff = ~np.isclose(a, b, rtol=1e-9, atol=1e-9, equal_nan=True)
    if not diff.any():
        return None, None, None
    first = tuple(int(i) for i in np.argwhere(diff)[0])
    sl = tuple(slice(max(0, i - (0 if k < a.ndim - 2 else 0)), i + (1 if k < a.ndim - 2 else 2))
               for k, i in enumerate(first))
    return first, sl, (a[sl], b[sl])


def _fmt_index(sl) -> str:
    return "[" + ",".join(f"{s.start}:{s.stop}" if s.stop - s.start > 1 else f"{s.start}" for s in sl) + "]"


def numbers(x) -> list | float:
    """A counterexample's values as JSON numbers (nested lists of floats; integers where
    the values are whole)."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.size and np.all(np.isfinite(arr)) and np.allclose(arr, np.round(arr)):
        return np.round(arr).astype(np.int64).tolist()
    return arr.tolist()


def _fmt(x, precision: int = 4) -> str:
    arr = np.asarray(x, dtype=np.float64)
    if arr.size and np.all(np.isfinite(arr)) and np.allclose(arr, np.round(arr)):
        arr = np.round(arr).astype(np.int64)
        return np.array2string(arr, separator=", ")
    return np.array2string(arr, precision=precision, separator=", ", suppress_small=True)


CONTRACTIONS = {"aten.mm", "aten.bmm", "aten.matmul", "aten.addmm", "aten.baddbmm", "aten.linear"}
BIASED = {"aten.addmm", "aten.baddbmm", "aten.linear"}


def _differ(a, b) -> bool:
    return a is not None and b is not None and (len(a) != len(b) or not np.array_equal(a, b))


def _contracts_sharded(operands: list) -> bool:
    """Both operands hold the same proper block of the contracted dim: a partial product."""
    return len(operands) == 2 and operands[0].positions[-1] is not None \
        and not _differ(operands[0].positions[-1], operands[1].positions[-2])


def _reduced_later(graph: Graph, node: Node, status: dict) -> bool:
    """Whether `node`'s value flows into a sum across ranks through ops that read no other
    varying tensor: the reduction is there, but after `node` instead of before it."""
    users = graph.users()
    seen, stack = {node}, [node]
    while stack:
        n = stack.pop()
        for u in users.get(n, ()):
            opdef = lookup(u.op)
            if opdef is not None and opdef.collective and "reduce" in u.op:
                return True
            others = [x for x in u.inputs
                      if x is not n and not (status.get(x) is not None and status[x].kind == "const")]
            if not others and u not in seen:
                seen.add(u)
                stack.append(u)
    return False


def _misread_operand(run, seq: Graph, node: Node, inputs: list, input_rels: list, rank: int):
    """An operand whose elements are not elements of the tensor the single-device op reads
    in its place (q, k or v cut from the wrong section of a fused weight, a key read where
    the value belongs, an activation applied to the up half of a fused gate-up product):
    (operand, what it holds, what belongs there), else None."""
    if not inputs or is_collective(node) or any(
            rel is None or rel.kind not in ("held", "const") for rel in input_rels):
        return None
    got = [run.dist[rank].get(x) for x in inputs]
    buffers = {id(g) for g, rel in zip(got, input_rels) if rel.kind == "const"}  # output buffers, constants

    def inside(want: Node, dval) -> bool:
        if id(dval) in buffers:
            return True
        sval = run.seq.get(want)
        return isinstance(sval, Val) and isinstance(dval, Val) and sval.t == dval.t and \
            positions_in(run.terms, sval, dval) is not None
    best = None
    for s in seq.nodes:
        want = [x for x in s.inputs if isinstance(run.seq.get(x), Val)]
        if s.op != node.op or len(want) != len(got):
            continue
        differ = [i for i, (w, g) in enumerate(zip(want, got)) if not inside(w, g)]
        if not differ:
            return None
        # one operand: only another section of the very tensor the single-device op reads
        # counts (elements of some other tensor are a value mismatch, not a misread)
        section = len(got) == 1 and isinstance(run.seq.get(want[0]), Val) and isinstance(got[0], Val) \
            and run.seq[want[0]].t == got[0].t
        if (len(differ) < len(got) or section) and (best is None or len(differ) < len(best[1])):
            best = (want, differ)
    if best is None:
        return None
    i = best[1][0]
    holds, belongs = input_rels[i].seq_node, best[0][i]
    return inputs[i].name, holds.name, belongs.name, _section_root(holds) is _section_root(belongs)


SECTIONING_OPS = SLICING_OPS | {"getitem", "aten.split", "aten.split_with_sizes", "aten.chunk", "aten.unbind",
                                "aten.view", "aten.reshape", "aten._unsafe_view", "aten.transpose", "aten.permute",
                                "aten.t", "aten.clone", "aten.contiguous", "aten.expand", "aten.unsqueeze",
                                "aten.squeeze", "aten.alias", "aten.detach"}


def _section_root(node: Node) -> Node:
    """The tensor `node` is a section (slice, split part, view) of: two sections of one root
    read in each other's place is a wrong offset into it; of two roots, a wrong operand."""
    while node.op in SECTIONING_OPS and node.args and isinstance(node.args[0], Node):
        node = node.args[0]
    return node


def _borrowed_piece(dist, inputs: list, status: list, ranks: list[int]):
    """An operand that a broken rank holds as the very same proper piece as a correct rank,
    while another operand's piece differs between them: the broken rank pairs its own piece
    of one tensor with another rank's piece of the other (a wrong rank -> shard mapping).
    (operand, correct rank), else None."""
    def piece(q: int, x: Node):
        g = dist.graphs[q]
        rel = status[q].get(g.node(x.name)) if g.has(x.name) else None
        return rel.positions if rel is not None and rel.kind == "held" else None

    def same(a, b) -> bool:
        return len(a) == len(b) and all((p is None) == (q is None) and (p is None or np.array_equal(p, q))
                                        for p, q in zip(a, b))
    r = ranks[0]
    for q in (q for q in range(dist.world_size) if q not in ranks):
        pieces = [(x, piece(r, x), piece(q, x)) for x in inputs]
        pieces = [(x, a, b) for x, a, b in pieces if a is not None and b is not None]
        if not any(not same(a, b) for _, a, b in pieces):
            continue
        for x, a, b in pieces:
            if any(p is not None for p in a) and same(a, b):
                return x.name, q
    return None


def _mixed_sharded_dim(counterpart: Node | None, input_rels: list, s_env: dict):
    """The sharded dim along which the single-device op combines elements (a softmax over
    it): the op applied to the pieces its operands hold is not the piece of its result.
    None when it commutes with the pieces, or when that cannot be told."""
    if counterpart is None or counterpart not in s_env or isinstance(counterpart.type, tuple):
        return None
    op_node, index = counterpart, None
    if counterpart.op == "getitem" and isinstance(counterpart.args[0], Node):  # one result of a multi-result op
        op_node, index = counterpart.args[0], counterpart.args[1]
    opdef = lookup(op_node.op)
    if opdef is None or opdef.collective:
        return None
    local, vecs = dict(s_env), None
    for rel in input_rels:
        if rel is None or rel.kind != "held" or rel.positions is None or rel.seq_node not in op_node.inputs \
                or rel.seq_node not in s_env or all(p is None for p in rel.positions):
            continue
        local[rel.seq_node] = held(s_env[rel.seq_node], rel.positions)
        if vecs is None and len(rel.positions) == np.ndim(s_env[counterpart]):
            vecs = rel.positions
    if vecs is None:
        return None
    try:
        with np.errstate(all="ignore"):
            got = run_numerics(opdef, op_node, resolve(op_node.args, local),
                               {k: resolve(v, local) for k, v in op_node.kwargs.items()})
            got = got[index] if index is not None else got
        want = held(s_env[counterpart], vecs)
    except (ArithmeticError, LookupError, TypeError, ValueError):  # no such pieces to apply it to: nothing to tell
        return None
    if isinstance(got, tuple) or np.shape(got) != want.shape or np.allclose(got, want, rtol=1e-9, atol=1e-9,
                                                                           equal_nan=True):
        return None
    return next(d for d, p in enumerate(vecs) if p is not None)


EMPTY_OPS = ("empty", "empty_like", "new_empty", "empty_strided")


def _whole(rel) -> bool:
    """`rel` holds every element of its single-device tensor (in order)."""
    return rel.positions is None or all(p is None or np.array_equal(p, np.arange(size))
                                        for p, size in zip(rel.positions, rel.seq_node.shape))


def _classify(node: Node, input_rels: list, ranks: list[int], world: int, ratio,
              ratio_of: str = "the value", reduced_later: bool = False, misread=None,
              borrowed=None, mixed_dim: int | None = None) -> tuple[str, str]:
    """The bug class and a one-line fix hint naming the place."""
    where = f" at {node.source}" if node.source else ""
    on_ranks = f"rank(s) {', '.join(map(str, ranks))}"
    partial_in = any(rel is not None and rel.partial == "sum" for rel in input_rels)
    op = node.op.split(".")[-1]
    if op in EMPTY_OPS:
        return "broken-dataflow", f"this buffer is read but never written; use the collective's result instead{where}"
    pieces = any(rel is not None and rel.kind == "piece" for rel in input_rels)  # shares of a sum
    if is_collective(node):
        reduce_op = node.args[1] if len(node.args) > 2 and isinstance(node.args[1], str) else None
        first = input_rels[0] if input_rels else None
        if any(rel is not None and rel.kind == "local" for rel in input_rels):
            return "value-mismatch", (f"the ranks' values combined here are rank-local lookups that still hold the "
                                      f"rows outside each rank's range: zero those rows (x[~in_range] = 0) before "
                                      f"this {op}{where}")
        if op == "all_reduce" and first is not None and first.kind == "held":
            if _whole(first):
                return "reduced-twice", f"the input of this all_reduce is already complete on every rank: remove the extra all_reduce{where}"
            return ("wrong-collective", f"the input of this all_reduce is a piece (shard) of the value, not a partial "
                                        f"sum: all_gather the pieces instead of summing them{where}")
        if reduce_op and reduce_op != "sum" and partial_in:
            return "wrong-reduce-op", f"partial sums must be combined with reduce op 'sum', not '{reduce_op}'{where}"
        if op.startswith("all_gather") and (partial_in or pieces):
            return ("wrong-collective", f"this {op} gathers partial sums, which must be summed: use all_reduce(sum) "
                                        f"(or reduce_scatter) instead{where}")
        if op in DIM_COLLECTIVES:
            return "wrong-dim", f"the shards are gathered/scattered along a dim that does not match their sharding{where}"
        if op in ("reduce", "gather"):
            return "wrong-collective", (f"after {op} only the root (group rank {node.args[-2]}) holds the result; the "
                                        f"other ranks' buffers are backend-defined: read it on the root only, broadcast "
                                        f"it from there, or use all_{op}; check dst (a global rank) against group_dst "
                                        f"(a group rank){where}")
        return "wrong-collective", f"this collective does not produce the single-device value{where}"
    states = [rel.factor for rel in input_rels if rel is not None and rel.kind == "softmax-state"]
    if states:
        return _softmax_merge_class(op, states, rel_sizes(input_rels), where)
    if pieces and op in ("div", "mul") and len(list(node.inputs)) == 1:
        return ("scaling-mismatch",
                f"a share of a sum (one micro-batch's or one rank's) is rescaled on its own, so the shares no longer "
                f"add up to the single-device value: scale the whole once, after accumulating{where}")
    if pieces and op == "div":
        return ("wrong-normalization",
                f"a piece of a sum (one micro-batch's or one rank's share) is divided by a count of its own: divide "
                f"every piece by the global count (all micro-batches, all data-parallel ranks) so the pieces add up "
                f"to the whole{where}")
    if partial_in or (pieces and node.op in LINEAR_OPS):  # a share of a sum (over a sub-group too) taken whole
        if node.op in LINEAR_OPS:
            return ("partial-sum-never-reduced",
                    f"insert all_reduce(sum) over the group on the partial-sum operand before this {op}{where}"
                    " (or add the replicated operand only once, after the reduction)")
        if reduced_later:
            return ("nonlinearity-on-partial",
                    f"{op} is applied to a partial sum that is all-reduced only afterwards: move the all_reduce(sum) "
                    f"before the {op}{where}")
        return ("partial-sum-never-reduced",
                f"{op} reads a partial sum that is never all-reduced: insert all_reduce(sum) over the group on "
                f"its input before this {op}{where}")
    if node.op in SLICING_OPS:
        return ("wrong-shard-offset", f"this {op} cuts the piece of {on_ranks} at the wrong offset: each rank must "
                                      f"take its own chunk{where}")
    if node.op in SCATTERING_OPS:
        return ("wrong-shard-offset", f"this {op} writes a piece on {on_ranks} at the wrong offset (or the wrong "
                                      f"piece): each piece must land where the single-device program has it{where}")
    if misread is not None and not misread[3]:
        operand, holds, belongs, _ = misread
        return ("wrong-operand", f"on {on_ranks}, operand {operand} of this {op} holds single-device {holds} where "
                                 f"{belongs} belongs: the op reads the wrong tensor (a gradient or branch "
                                 f"taken twice, outputs returned in the wrong order){where}")
    if misread is not None:
        operand, holds, belongs, _ = misread
        return ("wrong-shard-offset", f"on {on_ranks}, operand {operand} of this {op} holds single-device {holds} "
                                      f"where {belongs} belongs: check which section/shard of the (fused) tensor is "
                                      f"passed here{where}")
    if node.op in CONTRACTIONS:
        operands = [rel for rel in input_rels if rel is not None and rel.positions is not None][-2:]
        if len(operands) == 2 and _differ(operands[0].positions[-1], operands[1].positions[-2]):
            return ("wrong-shard-offset",
                    f"the operands of this {op} hold different blocks of the contracted dim on {on_ranks}: "
                    f"check which shard of each weight a rank loads{where}")
        if _contracts_sharded(operands) and node.op in BIASED:
            return ("partial-sum-never-reduced",
                    f"this {op} adds its bias to a partial sum on every rank, so the bias is counted {world} times: "
                    f"compute without the bias, all_reduce(sum), then add the bias once{where}")
    if borrowed is not None:
        operand, other = borrowed
        return ("wrong-shard-offset", f"on {on_ranks}, operand {operand} of this {op} is the same piece as on rank "
                                      f"{other} while the other operands are the rank's own: check which shard of "
                                      f"{operand} each rank takes{where}")
    unwritten = [x.name for x in node.inputs if x.op.split(".")[-1] in EMPTY_OPS]
    if unwritten:
        return ("broken-dataflow", f"this {op} reads {', '.join(unwritten)}, a buffer that is never written (a "
                                   f"collective or copy that should fill it is missing): use the value meant for it{where}")
    if mixed_dim is not None:
        return ("wrong-dim", f"this {op} combines elements along dim {mixed_dim}, which the ranks hold in pieces: "
                             f"shard another dim, or gather dim {mixed_dim} before the {op}{where}")
    if node.op == "aten.masked_fill" and len(node.args) > 2 and node.args[2] == float("-inf") \
            and input_rels and input_rels[0] is not None and input_rels[0].kind == "held":
        return ("mask-offset", f"on {on_ranks} this causal mask is built for other query/key positions than the "
                               f"scores it masks hold (a sequence offset off, or a K/V block received from another "
                               f"rank than the one the positions assume: the ring step direction): build it from the "
                               f"positions of the rows and keys actually held{where}")
    if len(ranks) < world:
        return ("rank-specific-mismatch",
                f"{on_ranks} compute this differently from the others: check per-rank constants "
                f"and shard offsets{where}")
    if ratio is not None:
        return ("scaling-mismatch", f"{ratio_of} is {ratio:g}x the single-device value: check the scale factor{where}")
    return "value-mismatch", f"this {op} does not compute the single-device value from its (correct) inputs{where}"


def rel_sizes(input_rels: list) -> int:
    """The key count of the scores online-softmax states are over (their last dim)."""
    return next((rel.seq_node.shape[-1] for rel in input_rels if rel is not None and rel.kind == "softmax-state"), 0)


def _softmax_merge_class(op: str, states: list, keys: int, where: str) -> tuple[str, str]:
    """Class and hint of a break where partial online-softmax states meet (ring / flash attention)."""
    roles = {str(s) for s in states}
    if roles == {"shift"} and op in ("add", "sub", "mul"):
        return ("lse-merge-wrong", f"the log-sum-exps (or running maxes) of two key blocks are combined with {op}: merge "
                                   f"them with logaddexp (log(exp(a) + exp(b))), or torch.maximum for the max{where}")
    sums = [s for s in states if str(s) == "sum"]
    if op in ("add", "sub") and len(sums) == 2 and sums[0].shift == sums[1].shift and sums[0].overlaps(sums[1], keys):
        return ("softmax-block-merged-twice", f"partial softmax sums / accumulators over overlapping key blocks are "
                                              f"added: a key block is merged twice; merge every block once{where}")
    if op in ("add", "sub"):
        return ("softmax-rescale-missing",
                f"partial softmax sums / accumulators relative to different running maxes are added: rescale each "
                f"by exp(m_old - m_new) to the common max before adding{where}")
    return ("softmax-merge-wrong", f"this {op} combines partial online-softmax results (running max, sum, "
                                   f"accumulator) in a way that is not the softmax over the merged key blocks: "
                                   f"check the rescaling by exp(m_old - m_new) and the final acc / l{where}")


def _constants_differ(node: Node, counterpart: Node | None) -> str:
    """The constant arguments in which `node` and the single-device op computing the same op
    from the same inputs differ (an eps, an exponent, an attention scale), as text; else ''."""
    if counterpart is None or counterpart.op != node.op:
        return ""
    args = [(f"argument {i}", a, b) for i, (a, b) in enumerate(zip(node.args, counterpart.args))
            if not isinstance(a, Node) and not isinstance(b, Node) and a != b]
    kwargs = [(k, node.kwargs.get(k), counterpart.kwargs.get(k))
              for k in sorted(set(node.kwargs) | set(counterpart.kwargs))
              if not isinstance(node.kwargs.get(k), Node) and node.kwargs.get(k) != counterpart.kwargs.get(k)]
    return ", ".join(f"{name} = {a!r} where the single-device op has {'none (the default)' if b is None else repr(b)}"
                     for name, a, b in args + kwargs)


def _evidence(want: np.ndarray, got: np.ndarray, s_in: dict, rank: int, tensor: str, holder: str):
    """A counterexample (a window around the first differing element of two equal-shape
    values) and the ratio got/want when it is one constant other than 1; (None, None) when
    they agree."""
    at, sl, pair = _window(want, got)
    if at is None:
        return None, None
    ratio = None
    with np.errstate(all="ignore"):
        q = got / want
    finite = np.isfinite(q) & (want != 0)
    if finite.any() and np.allclose(q[finite], q[finite].flat[0]) and not np.isclose(q[finite].flat[0], 1):
        ratio = float(q[finite].flat[0])
    digits = next((d for d in (4, 8, 12) if _fmt(pair[0], d) != _fmt(pair[1], d)), 16)
    inputs = list(s_in.items())[:6]
    cex = {
        "inputs": {k: numbers(np.asarray(v).reshape(-1)[:6]) for k, v in inputs},
        "tensor": tensor,
        "index": _fmt_index(sl),
        "single_device": numbers(pair[0]),
        "distributed": numbers(pair[1]),
        "rank": rank,
        "display": {"inputs": {k: _fmt(v.reshape(-1)[:6]) + (" ..." if v.size > 6 else "") for k, v in inputs},
                    "single_device": _fmt(pair[0], digits), "distributed": _fmt(pair[1], digits)},
        "text": f"single-device {tensor}{_fmt_index(sl)} = {_fmt(pair[0], digits)}; "
                f"rank {rank}'s {holder} holds {_fmt(pair[1], digits)}",
    }
    return cex, ratio


def _output_evidence(seq, dist, outputs: list[str], rank: int, s_in, s_env, d_envs):
    """Evidence at the first differing output whose ranks hold it whole: where the
    expectation is stated, so the comparison needs no guess about intermediate tensors."""
    for name in outputs:
        snode, dnode = seq.outputs[name], dist.graphs[rank].outputs.get(name)
        if dnode is None or dnode not in d_envs[rank] or snode not in s_env:
            continue
        want, got = (np.asarray(v, dtype=np.float64) for v in (s_env[snode], d_envs[rank][dnode]))
        if want.shape == got.shape:
            cex, ratio = _evidence(want, got, s_in, rank, f"output {name}", dnode.name)
            if cex is not None:
                return cex, ratio, name
    return None, None, None


def diagnose(run, relater, seq, dist, node: Node, ranks: list[int], status, s_in, s_env, d_envs,
             outputs: list[str] = (), expected: str | None = None, cex: dict | None = None) -> Finding:
    """The finding for `node` (the first broken tensor on `ranks`). Its counterexample
    compares it with its single-device counterpart; when there is none to compare with (the
    node consumed a dim its operand holds only part of: it is a piece of a reduction, as in
    gradient accumulation), the counterexample is taken at the first differing of `outputs`."""
    r = ranks[0]
    producer = node.args[0] if node.op == "getitem" and node.args and isinstance(node.args[0], Node) else node
    inputs = [x for x in producer.inputs if x in status[r]]
    input_rels = [status[r].get(x) for x in inputs]
    own = status[r].get(node)
    same_op = counterpart_of(seq, producer, input_rels, run.seq)
    # a proven multiple names its single-device tensor; otherwise the op applied to the inputs' counterparts
    counterpart = own.seq_node if own is not None and own.kind == "scaled" else same_op
    if counterpart is not None and producer is not node and isinstance(counterpart.type, tuple):
        index = node.args[1]  # the same output of the single-device op
        counterpart = next((s for s in seq.nodes if s.op == "getitem" and s.args[:1] == (counterpart,)
                            and s.args[1] == index), None)
    world = dist.world_size

    first = input_rels[0] if input_rels else None
    if expected is None:  # what the op's first input's layout would make of a correct result
        expected = "Replicate()"
        if first is not None and first.positions is not None and first.kind == "held":
            peers = [status[q].get(dist.graphs[q].node(inputs[0].name)) if dist.graphs[q].has(inputs[0].name) else None
                     for q in range(world)]
            if all(p is not None and p.positions is not None and len(p.positions) == len(first.positions)
                   for p in peers):  # (rank-dependent code may give other tensors the same name)
                expected = summarize([p.positions for p in peers], tuple(first.seq_node.shape), world)
    ref_name = counterpart.name if counterpart is not None else None
    expected_text = f"{expected} of single-device {ref_name}" if ref_name else expected

    ratio, piece = None, False
    d_val = np.asarray(d_envs[r].get(node), dtype=np.float64) if cex is None and node in d_envs[r] else None
    if counterpart is not None and d_val is not None:
        s_val = np.asarray(s_env[counterpart], dtype=np.float64)
        local = s_val
        if first is not None and first.positions is not None and len(first.positions) == s_val.ndim and all(
                p is None or not len(p) or p.max() < size for p, size in zip(first.positions, s_val.shape)):
            cand = held(s_val, first.positions)
            if cand.shape == d_val.shape:
                local = cand
        elif first is not None and first.positions is not None and any(p is not None for p in first.positions):
            piece = True
        if local.shape == d_val.shape and not piece:
            cex, ratio = _evidence(local, d_val, s_in, r, ref_name, node.name)
    output = None
    if cex is None:
        cex, ratio, output = _output_evidence(seq, dist, list(outputs), r, s_in, s_env, d_envs)
    if piece:
        ref_name, expected_text = None, "a single-device tensor"
    kind, hint = _classify(producer, input_rels, ranks, world, ratio, f"output {output}" if output else "the value",
                           reduced_later=_reduced_later(dist.graphs[r], node, status[r]),
                           misread=_misread_operand(run, seq, producer, inputs, input_rels, r),
                           borrowed=_borrowed_piece(dist, inputs, status, ranks),
                           mixed_dim=_mixed_sharded_dim(counterpart, input_rels, s_env))
    if kind == "value-mismatch" and producer.op in SIZED_VIEWS and first is not None and first.kind == "held":
        cause = view_cause(producer, first, run.seq)  # a view sized unlike the single-device one's
        if cause is not None:
            kind, hint = "wrong-view-size", view_hint(*cause) + (f" at {producer.source}" if producer.source else "")
    constants = _constants_differ(producer, same_op)
    if constants and kind in ("value-mismatch", "rank-specific-mismatch"):
        hint = (f"the constant arguments of this {producer.op.split('.')[-1]} differ from the single-device op's "
                f"({constants}); " + hint)
    if own is not None and own.kind == "piece" and is_collective(node):
        group = node.args[-1] if node.args and isinstance(node.args[-1], tuple) else ()
        kind, hint = "wrong-group", (f"this {node.op.split('.')[-1]} over ranks {list(group)} leaves a share of the "
                                     f"reduction that the later steps never complete: the pieces are held by another "
                                     f"group of ranks (e.g. the shard group, not the replicate group)"
                                     + (f" at {node.source}" if node.source else ""))
    multiple = own is not None and own.kind == "scaled" and kind in ("value-mismatch", "scaling-mismatch")
    if multiple:  # proven: exactly a multiple
        ref_name = own.seq_node.name
        expected_text = f"{expected} of single-device {ref_name}"
        kind, hint = "scaling-mismatch", (f"this is exactly {own.factor} times single-device {ref_name}: check the "
                                          f"scale factor (group size, micro-batch count, loss normalisation)"
                                          + (f" at {node.source}" if node.source else ""))
    rels_text = ", ".join(f"{x.name}: " + ("unrelated" if rel is None else f"{rel.describe()} of {rel.seq_node.name}")
                          for x, rel in zip(inputs, input_rels))
    if own is not None and reorders(node, own, status[r]):  # held, but its elements out of order
        dim, positions = next((d, p) for d, p in enumerate(own.positions) if not in_order([p]))
        where = f" at {node.source}" if node.source else ""
        held_text = (f"single-device {own.seq_node.name}'s elements out of order along dim {dim} "
                     f"({[int(p) for p in positions]})")
        return Finding("wrong-operand", ranks, node.name, node.op, _src(node), expected_text, held_text,
                       f"{producer.name} = {producer.op}(...) on rank(s) {', '.join(map(str, ranks))} holds "
                       f"{held_text}; its inputs: {rels_text}"
                       + (f"; output {output} differs as a result" if output else ""),
                       f"this {node.op.split('.')[-1]} puts its operands in the wrong order (outputs returned "
                       f"swapped, halves crossed): each piece must land where the single-device program has it"
                       f"{where}", cex, counterpart=own.seq_node.name)
    if own is not None and own.partial == "sum":  # related, but only as a partial sum (a missing reduction)
        where = f" at {node.source}" if node.source else ""
        held_text = f"{own.describe()} of single-device {own.seq_node.name}"
        want = np.asarray(s_env[own.seq_node], dtype=np.float64) if own.seq_node in s_env else None
        for q in ranks:  # a rank whose partial differs from the whole (one may hold all of it)
            got = np.asarray(d_envs[q][node], dtype=np.float64) if node in d_envs[q] else None
            if want is not None and got is not None and want.shape == got.shape:
                cex = _evidence(want, got, s_in, q, own.seq_node.name, node.name)[0] or cex
                if cex is not None:
                    break
        returned = [o for o in outputs if dist.graphs[r].outputs.get(o) is node]
        return Finding("partial-sum-never-reduced", ranks, node.name, node.op, _src(node), expected, held_text,
                       (f"output {returned[0]}: " if returned else "") +
                       f"{node.name} = {producer.op}(...) on rank(s) {', '.join(map(str, ranks))} holds only "
                       f"{held_text} (expected {expected}); its inputs: {rels_text or 'none'}",
                       f"all_reduce(sum) {node.name} over the group before it is used as the whole value{where}", cex)
    actual = f"{own.factor} times single-device {own.seq_node.name}" if multiple else "none"
    message = (f"{producer.name} = {producer.op}(...) on rank(s) {', '.join(map(str, ranks))} "
               + (f"holds {actual}" if multiple else "is not related to any single-device tensor")
               + (f" (expected {expected_text})" if ref_name else "") + f"; its inputs: {rels_text or 'none'}"
               + (f"; output {output} differs as a result" if output else ""))
    return Finding(kind, ranks, node.name, node.op, _src(node), expected_text, actual, message, hint, cex,
                   counterpart=ref_name)
