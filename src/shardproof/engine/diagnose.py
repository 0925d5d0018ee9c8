"""Turn the first broken tensor into a finding a user can act on: what was expected,
what holds instead, a concrete counterexample, a bug class and a fix hint."""
from __future__ import annotations

import numpy as np

from ..ir.graph import Node
from ..relations.spec import held
from ..ops.registry import lookup
from .result import Finding

COLLECTIVE_PREFIX = "_c10d_functional."
LINEAR_OPS = {"aten.add", "aten.sub", "aten.cat", "aten.stack"}


def _src(node: Node | None) -> str | None:
    return str(node.source) if node is not None and node.source else None


def counterpart_of(seq, node: Node, input_rels: list, seq_env: dict | None = None) -> Node | None:
    """The single-device node computing the same op from the counterparts of the inputs
    (compared by value when the single-device terms are given: views and copies of a
    tensor are the same input)."""
    if node.op.startswith(COLLECTIVE_PREFIX) or lookup(node.op) is None:
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
    # tensor of the same rank that reads, or contains, what the inputs correspond to.
    known = {w for w in want if w is not None}
    if node.type is None or isinstance(node.type, tuple):
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


def _classify(node: Node, input_rels: list, ranks: list[int], world: int, ratio,
              ratio_of: str = "the value") -> tuple[str, str]:
    where = f" at {node.source}" if node.source else ""
    partial_in = any(rel is not None and rel.partial == "sum" for rel in input_rels)
    op = node.op.split(".")[-1]
    if op in ("empty", "empty_like", "new_empty", "empty_strided"):
        return "broken-dataflow", f"this buffer is read but never written; use the collective's result instead{where}"
    if node.op.startswith(COLLECTIVE_PREFIX):
        reduce_op = node.args[1] if len(node.args) > 2 and isinstance(node.args[1], str) else None
        if op == "all_reduce" and input_rels and input_rels[0] is not None and input_rels[0].kind == "held":
            return "reduced-twice", f"the input of this all_reduce is already complete on every rank: remove the extra all_reduce{where}"
        if reduce_op and reduce_op != "sum" and partial_in:
            return "wrong-reduce-op", f"partial sums must be combined with reduce op 'sum', not '{reduce_op}'{where}"
        if op in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"):
            return "wrong-dim", f"the shards are gathered/scattered along a dim that does not match their sharding{where}"
        return "wrong-collective", f"this collective does not produce the single-device value{where}"
    pieces = any(rel is not None and rel.kind == "piece" for rel in input_rels)
    if pieces and op in ("div", "mul") and len(list(node.inputs)) == 1:
        return ("scaling-mismatch",
                f"a share of a sum (one micro-batch's or one rank's) is rescaled on its own, so the shares no longer "
                f"add up to the single-device value: scale the whole once, after accumulating{where}")
    if pieces and op == "div":
        return ("wrong-normalization",
                f"a piece of a sum (one micro-batch's or one rank's share) is divided by a count of its own: divide "
                f"every piece by the global count (all micro-batches, all data-parallel ranks) so the pieces add up "
                f"to the whole{where}")
    if partial_in:
        if node.op in LINEAR_OPS:
            return ("partial-sum-never-reduced",
                    f"insert all_reduce(sum) over the group on the partial-sum operand before this {op}{where}"
                    " (or add the replicated operand only once, after the reduction)")
        return ("nonlinearity-on-partial",
                f"{op} is applied to a partial sum: all_reduce(sum) its input before the {op}{where}")
    if node.op in CONTRACTIONS:
        operands = [rel for rel in input_rels if rel is not None and rel.positions is not None][-2:]
        if len(operands) == 2 and _differ(operands[0].positions[-1], operands[1].positions[-2]):
            return ("wrong-shard-offset",
                    f"the operands of this {op} hold different blocks of the contracted dim on rank(s) "
                    f"{', '.join(map(str, ranks))}: check which shard of each weight a rank loads{where}")
        if _contracts_sharded(operands) and node.op in BIASED:
            return ("partial-sum-never-reduced",
                    f"this {op} adds its bias to a partial sum on every rank, so the bias is counted {world} times: "
                    f"compute without the bias, all_reduce(sum), then add the bias once{where}")
    if len(ranks) < world:
        return ("rank-specific-mismatch",
                f"rank(s) {', '.join(map(str, ranks))} compute this differently from the others: check per-rank constants "
                f"and shard offsets{where}")
    if ratio is not None:
        return ("scaling-mismatch", f"{ratio_of} is {ratio:g}x the single-device value: check the scale factor{where}")
    return "value-mismatch", f"this {op} does not compute the single-device value from its (correct) inputs{where}"


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
    cex = {
        "inputs": {k: _fmt(v.reshape(-1)[:6]) + (" ..." if v.size > 6 else "") for k, v in list(s_in.items())[:6]},
        "tensor": tensor,
        "index": _fmt_index(sl),
        "single_device": _fmt(pair[0], digits),
        "distributed": _fmt(pair[1], digits),
        "rank": rank,
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
    from .verify import summarize
    r = ranks[0]
    producer = node.args[0] if node.op == "getitem" and node.args and isinstance(node.args[0], Node) else node
    inputs = [x for x in producer.inputs if x in status[r]]
    input_rels = [status[r].get(x) for x in inputs]
    counterpart = counterpart_of(seq, producer, input_rels, run.seq)
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
    kind, hint = _classify(producer, input_rels, ranks, world, ratio,
                           f"output {output}" if output else "the value")
    own = status[r].get(node)
    if own is not None and own.kind == "piece" and node.op.startswith(COLLECTIVE_PREFIX):
        group = node.args[-1] if node.args and isinstance(node.args[-1], tuple) else ()
        kind, hint = "wrong-group", (f"this {node.op.split('.')[-1]} over ranks {list(group)} leaves a share of the "
                                     f"reduction that the later steps never complete: the pieces are held by another "
                                     f"group of ranks (e.g. the shard group, not the replicate group)"
                                     + (f" at {node.source}" if node.source else ""))
    if own is not None and own.kind == "scaled":  # proven: exactly a multiple of the single-device value
        ref_name = own.seq_node.name
        expected_text = f"{expected} of single-device {ref_name}"
        kind, hint = "scaling-mismatch", (f"this is exactly {own.factor} times single-device {ref_name}: check the "
                                          f"scale factor (group size, micro-batch count, loss normalisation)"
                                          + (f" at {node.source}" if node.source else ""))
    rels_text = ", ".join(f"{x.name}: " + ("unrelated" if rel is None else f"{rel.describe()} of {rel.seq_node.name}")
                          for x, rel in zip(inputs, input_rels))
    message = (f"{producer.name} = {producer.op}(...) on rank(s) {', '.join(map(str, ranks))} is not related to any single-device "
               f"tensor" + (f" (expected {expected_text})" if ref_name else "") + f"; its inputs: {rels_text or 'none'}"
               + (f"; output {output} differs as a result" if output else ""))
    return Finding(kind, ranks, node.name, node.op, _src(node), expected_text, "none", message, hint, cex)
