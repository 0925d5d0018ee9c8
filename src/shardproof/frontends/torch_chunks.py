"""Executing a graph's largest values a piece at a time (for :mod:`.torch_exec`).

A value of at least :data:`LAZY_BYTES` whose op treats a leading range of its elements
independently is never held whole: it is *lazy*. A later node with a small result that
reads lazy values (a *sink*: a reduction over trailing dims, a batched matmul, an index
gather, any chunkable op whose result is small) is run chunk by chunk: for chunk ``i`` of
``n``, every lazy value it depends on (its *cone*) is computed for chunk ``i`` only, with
torch's own kernels on that chunk's operands, and only the sink's result is assembled.
So the single device's attention scores ``baddbmm -> view -> masked_fill -> softmax ->
dropout -> bmm`` never exist whole, only ``bmm``'s result does.

Chunks. Chunk ``i`` of a value with ``numel`` elements and ``n`` chunks is the contiguous
range ``[i*E, (i+1)*E)`` of its row-major elements (``E = numel / n``), which must be a
*block* of its shape: indices fixed in dims before some dim ``p``, ``c`` consecutive
indices of dim ``p``, everything after (:func:`block`). A reshape keeps such ranges, so
views that split or merge the leading dims pass chunks through. Which ops take chunks, and
how (each checked on the node's shapes and arguments by :func:`_fits`, else the region is
not chunked and the node runs whole, as before):

* pointwise ops (declared with the registry's ``elementwise_shape``; ``copy``): operands
  held whole are broadcast to the result's shape and sliced to the chunk;
* reshapes and copies (``view``, ``clone``, ``_to_copy``, ``unsqueeze``, ...);
* ``softmax`` over a dim the chunk holds whole; reductions (``sum``, ``amax``, ``max.dim``,
  ``mean``, ...) over dims the chunk holds whole;
* ``mm``/``addmm`` by rows, ``bmm``/``baddbmm`` by batch (or by rows within one batch);
* fills (``empty``, ``zeros``, ``ones``, ``full``) made at the chunk's shape;
* dropout, drawing exactly the elements of its (corresponding) draw that fall in the chunk
  (:meth:`.torch_rng.Randomness.draw_range`: draws are generated in fixed blocks of their
  flat index, so any range is the same values as the whole draw);
* ``index`` with index tensors over the rows of a chunked value (each row's chunk answers
  the indices that fall in it).

Chunked execution is the same ops on the same values: elementwise results are bitwise
those of the whole run; a matmul or reduction over a chunk may round differently from the
whole kernel (blocked differently), within the dtype's tolerance the confirmation uses.
A lazy value that a node cannot take in chunks is assembled whole before that node.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..engine.rng import RANDOM_OPS
from ..ir.graph import Graph, Node, TensorType
from ..ops.registry import lookup
from .torch_exec_ops import HELD

LAZY_BYTES = 256 << 20
"""Values at least this large (as held) are computed a chunk at a time where the graph allows."""
CHUNK_BYTES = 64 << 20
"""The most bytes one chunk of the largest value of a region takes (as held)."""

FLAT = {"aten.view", "aten._unsafe_view", "aten.reshape", "aten.unsqueeze", "aten.squeeze", "aten.flatten"}
COPIES = {"aten.clone", "aten.contiguous", "aten.alias", "aten.detach", "aten.lift_fresh_copy", "aten._to_copy"}
SOFTMAX = {"aten._softmax", "aten.softmax", "aten._log_softmax", "aten.log_softmax"}
REDUCE = {"aten.sum", "aten.amax", "aten.amin", "aten.mean", "aten.max", "aten.min", "aten.argmax", "aten.argmin",
          "aten.logsumexp"}
FILLS = {"aten.empty", "aten.zeros", "aten.ones", "aten.full"}
DROPOUT = {"aten.native_dropout", "aten.dropout"}
MATMUL = {"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm"}


def held_bytes(ty) -> int:
    """Bytes a value of type `ty` takes as held (:data:`~.torch_exec_ops.HELD`)."""
    if isinstance(ty, tuple):
        return sum(held_bytes(t) for t in ty if t is not None)
    if not isinstance(ty, TensorType):
        return 0
    return ty.numel * HELD.get(ty.dtype, torch.float64).itemsize


def _shape(node: Node) -> tuple | None:
    ty = node.type[0] if isinstance(node.type, tuple) and node.type else node.type
    return tuple(ty.shape) if isinstance(ty, TensorType) else None


def block(shape: tuple, n: int) -> tuple[int, int] | None:
    """(p, c): chunk i of `n` over `shape`'s row-major elements holds one index of each dim
    before p, c consecutive indices of dim p and all of the dims after; None where the
    chunks are not such blocks."""
    numel = math.prod(shape)
    if n <= 0 or numel % n:
        return None
    if n == 1:
        return (0, shape[0]) if shape else None
    e = numel // n
    tail = numel
    for p, s in enumerate(shape):
        tail //= s
        if tail and e % tail == 0 and s % (e // tail) == 0 and e // tail <= s:
            return p, e // tail
    return None


def block_shape(shape: tuple, pc: tuple[int, int]) -> tuple:
    p, c = pc
    return (1,) * p + (c,) + tuple(shape[p + 1:])


def block_index(shape: tuple, pc: tuple[int, int], i: int) -> tuple:
    """The slices of chunk `i` in a whole tensor of `shape`."""
    p, c = pc
    start = i * c * math.prod(shape[p + 1:])
    out = []
    for d in range(p):
        k = (start // math.prod(shape[d + 1:])) % shape[d]
        out.append(slice(k, k + 1))
    off = (start // math.prod(shape[p + 1:])) % shape[p]
    return tuple(out) + (slice(off, off + c),)


def _dims(value, rank: int) -> list[int]:
    dims = value if isinstance(value, (list, tuple)) else [value]
    return [int(d) % rank for d in dims] if rank else []


def _kind(node: Node) -> str | None:
    op = node.op
    if op == "getitem":
        return "getitem"
    if op in FLAT or op in COPIES:
        return "flat"
    if op in SOFTMAX:
        return "softmax"
    if op in REDUCE:
        return "reduce"
    if op in FILLS:
        return "fill"
    if op in DROPOUT:
        return "dropout"
    if op in RANDOM_OPS:  # other random ops draw their own way: run whole
        return None
    if op in MATMUL:
        return "matmul"
    if op == "aten.index":
        return "index"
    if op == "aten.copy":
        return "pointwise"
    opdef = lookup(op)
    from ..ops.common import elementwise_shape
    if opdef is not None and opdef.shape is elementwise_shape:
        return "pointwise"
    return None


@dataclass
class Sink:
    """A node run chunk by chunk (`n` chunks) over the lazy values of its `cone` (graph order)."""
    node: Node
    n: int
    cone: list
    piece_bytes: int = 0
    fused: list = field(default_factory=list)
    """Later sinks run in the same chunks (their cones overlap, their other operands are ready)."""


@dataclass
class ChunkPlan:
    """Which values are lazy, which nodes are run in chunks, and which lazy values some node
    needs whole (assembled before it)."""
    lazy: set = field(default_factory=set)
    sinks: dict = field(default_factory=dict)
    whole: set = field(default_factory=set)
    dead: set = field(default_factory=set)
    early: dict = field(default_factory=dict)
    """A sink run with an earlier one (:attr:`Sink.fused`) -> that sink's node."""
    needed: dict = field(default_factory=dict)
    """A lazy value in :attr:`whole` -> the nodes that read it whole."""

    def reads(self) -> dict:
        """node held whole -> the sinks (nodes) that read it through a lazy value (its last use
        is then the latest of them)."""
        out: dict = {}
        for s in self.sinks.values():
            for c in s.cone:
                for x in c.inputs:
                    if x not in self.lazy:
                        out.setdefault(x, []).append(s.node)
        for w, readers in self.needed.items():  # assembled whole when its first reader runs
            for c in _cone(w, self.lazy) + [w]:
                for x in c.inputs:
                    if x not in self.lazy:
                        out.setdefault(x, []).extend(readers)
        return out


def _cone(node: Node, lazy: set) -> list:
    seen, order = set(), []

    def visit(x):
        if x in seen or x not in lazy:
            return
        seen.add(x)
        for y in x.inputs:
            visit(y)
        order.append(x)
    for x in node.inputs:
        visit(x)
    return order


def _pc(node: Node, n: int):
    shape = _shape(node)
    return None if shape is None else block(shape, n)


def _lazy_arg(x, lazy: set) -> bool:
    return isinstance(x, Node) and x in lazy


def _fits(node: Node, n: int, lazy: set) -> bool:
    """Whether `node` can be computed as `n` chunks, its lazy operands given as their own
    chunks (the rules of the module docstring)."""
    kind, shape, pc = _kind(node), _shape(node), _pc(node, n)
    if kind is None or shape is None or pc is None:
        return False
    args = node.args
    if kind == "getitem":
        return _pc(args[0], n) is not None
    if kind == "fill":
        return bool(args) and isinstance(args[0], (list, tuple))
    if kind == "flat":  # a reshape keeps the order of the elements (not a view as another dtype)
        xs = _shape(args[0]) if args and isinstance(args[0], Node) else None
        return (xs is not None and math.prod(xs) == math.prod(shape) and _pc(args[0], n) is not None
                and (node.op not in FLAT or len(args) < 2 or not isinstance(args[1], str)))
    if kind in ("pointwise", "dropout"):
        return all(not _lazy_arg(x, lazy) or _shape(x) == shape for x in node.inputs)
    if kind == "softmax":
        return (len(args) > 1 and isinstance(args[1], int) and _shape(args[0]) == shape and
                _dims(args[1], len(shape))[0] > pc[0])
    if kind == "reduce":
        x = args[0]
        xs, xpc = _shape(x), _pc(x, n)
        if xs is None or xpc is None or len(args) < 2 or not isinstance(args[1], (int, list, tuple)):
            return False
        return all(d > xpc[0] for d in _dims(args[1], len(xs))) and not any(_lazy_arg(a, lazy) for a in args[1:])
    if kind == "matmul":
        return _fits_matmul(node, n, lazy, shape, pc)
    if kind == "index":
        x, idx = args[0], args[1] if len(args) > 1 else None
        xpc = _pc(x, n) if isinstance(x, Node) else None
        return (xpc is not None and xpc[0] == 0 and isinstance(idx, (list, tuple)) and idx and
                all(isinstance(i, Node) and i not in lazy and _shape(i) == _shape(idx[0]) for i in idx)
                and len(_shape(idx[0]) or ()) == 1)
    return False


def _fits_matmul(node: Node, n: int, lazy: set, shape: tuple, pc: tuple) -> bool:
    op, args = node.op, node.args
    a, b = (args[1], args[2]) if op in ("aten.addmm", "aten.baddbmm") else (args[0], args[1])
    if op in ("aten.addmm", "aten.baddbmm") and _lazy_arg(args[0], lazy) and _shape(args[0]) != shape:
        return False
    if op in ("aten.mm", "aten.addmm"):
        return pc[0] == 0 and not _lazy_arg(b, lazy) and (not _lazy_arg(a, lazy) or _pc(a, n) == (0, pc[1]))
    if pc[0] > 1:
        return False
    if pc[0] == 1 and _lazy_arg(b, lazy):
        return False
    return all(not _lazy_arg(x, lazy) or (_pc(x, n) or (9, 0))[:1] == (pc[0],) and _pc(x, n)[1] == pc[1]
               for x in (a, b))


def _divisors(m: int) -> list[int]:
    small, large = [], []
    k = 1
    while k * k <= m:
        if m % k == 0:
            small.append(k)
            if k * k != m:
                large.append(m // k)
        k += 1
    return small + large[::-1]


def _choose(node: Node, cone: list, lazy: set, piece: int) -> tuple[int, int] | None:
    """(n, bytes of one chunk of the cone's values) for the fewest chunks that fit `piece`
    (else the most that are valid); None where no chunking other than one is valid."""
    members = cone + [node]
    g = 0
    for x in members:
        s = _shape(x)
        g = math.gcd(g, math.prod(s)) if s is not None else g
    if node.op == "aten.index":  # the gather's result need not split: the rows of its operand do
        g = math.prod(_shape(node.args[0]))
    total = sum(held_bytes(x.type) for x in cone)
    best = None
    for n in _divisors(g)[1:]:
        if all(_fits(x, n, lazy) for x in members):
            best = (n, total // n)
            if max(held_bytes(x.type) for x in cone) // n <= piece:
                return best
    return best


def plan_chunks(graph: Graph, big: int | None = None, piece: int | None = None) -> ChunkPlan:
    """Which values of `graph` are computed a chunk at a time, and where (see the module
    docstring); values below `big` bytes (:data:`LAZY_BYTES`) and graphs without such values
    are left as they are. A sink whose result nothing reads is not run (:attr:`ChunkPlan.dead`)."""
    big, piece = big or LAZY_BYTES, piece or CHUNK_BYTES
    plan = ChunkPlan()
    lazy = plan.lazy
    outputs = set(graph.outputs.values())
    users = graph.users()
    for node in graph.nodes:
        kind = _kind(node)
        reads = [x for x in node.inputs if x in lazy]
        if kind is not None and kind != "index" and held_bytes(node.type) >= big and node not in outputs:
            lazy.add(node)
            continue
        if not reads:
            continue
        if kind is not None and not users[node] and node not in outputs:  # pure, read by nothing
            plan.dead.add(node)
            continue
        cone = _cone(node, lazy)
        chosen = _choose(node, cone, lazy, piece) if kind is not None else None
        if chosen is None:
            plan.whole.update(reads)
            for r in reads:
                plan.needed.setdefault(r, []).append(node)
            continue
        plan.sinks[node] = Sink(node, chosen[0], cone, chosen[1])
    _drop_unchunked(plan, graph)
    _fuse(plan, graph)
    return plan


def _fuse(plan: ChunkPlan, graph: Graph) -> None:
    """A later sink whose cone overlaps an earlier one's, with the same chunks, and whose
    other operands are all made before the earlier sink, runs in the earlier sink's chunks."""
    index = {n: i for i, n in enumerate(graph.nodes)}
    sinks = sorted(plan.sinks.values(), key=lambda s: index[s.node])
    for k, s in enumerate(sinks):
        if s.node in plan.early:
            continue
        cone = set(s.cone)
        for t in sinks[k + 1:]:
            outside = [x for y in t.cone + [t.node] for x in y.inputs if x not in plan.lazy]
            if (t.node not in plan.early and t.n == s.n and cone & set(t.cone) and
                    all(index[x] < index[s.node] for x in outside)):
                s.fused.append(t.node)
                plan.early[t.node] = s.node
                cone |= set(t.cone)
                s.piece_bytes = sum(held_bytes(x.type) for x in cone) // s.n  # one chunk of each, at once


def _drop_unchunked(plan: ChunkPlan, graph: Graph) -> None:
    """A lazy value that no sink reads is held whole where it is made."""
    read = {c for s in plan.sinks.values() for c in s.cone}
    for node in list(plan.lazy):
        if node not in read:
            plan.lazy.discard(node)
            plan.whole.discard(node)
    for node in list(plan.whole):
        if node not in plan.lazy:
            plan.whole.discard(node)
            plan.needed.pop(node, None)


def peak_bytes(graph: Graph, plan: ChunkPlan | None) -> tuple[int, str, int]:
    """(the most bytes live at once, the largest value's node, its bytes) running `graph`
    with `plan`: lazy values take nothing (those some node needs whole: all of it, from
    where they are made), a sink adds one chunk of its cone while it runs, and the values its
    cone reads stay live until it has run."""
    index = {n: i for i, n in enumerate(graph.nodes)}
    last = dict(index)
    for i, n in enumerate(graph.nodes):
        for x in n.inputs:
            last[x] = i
    for n in graph.outputs.values():
        last[n] = len(graph.nodes)
    lazy = set() if plan is None else plan.lazy - plan.whole
    if plan is not None:
        for x, sinks in plan.reads().items():
            last[x] = max([last[x]] + [index[s] for s in sinks])
    live, peak, big = 0, 0, ("", 0)
    dies: dict[int, int] = {}
    for i, n in enumerate(graph.nodes):
        size = 0 if n in lazy or (plan is not None and n in plan.dead) else held_bytes(n.type)
        if size > big[1]:
            big = (n.name, size)
        sink = plan.sinks.get(n) if plan is not None else None
        live += size
        peak = max(peak, live + (sink.piece_bytes if sink else 0))
        dies[last[n]] = dies.get(last[n], 0) + size
        live -= dies.pop(i, 0)
    return peak, big[0], big[1]


# ------------------------------------------------------------------ running a plan


class Lazy:
    """A lazy value in a rank's values: assembled whole (:meth:`whole`) only for a node that
    cannot take it in chunks."""
    __slots__ = ("node", "run")

    def __init__(self, node: Node, run: "ChunkRun"):
        self.node, self.run = node, run

    def whole(self):
        cone = _cone(self.node, self.run.plan.lazy)
        n = (_choose(self.node, cone, self.run.plan.lazy, CHUNK_BYTES) or (1, 0))[0]
        if not all(_fits(x, n, self.run.plan.lazy) for x in cone + [self.node]):
            n = 1
        value = self.run.run_sink(Sink(self.node, n, cone))[self.node]
        return self.run.coerce(self.node, value, self.node.type)


class ChunkRun:
    """Runs the sinks of `plan` for one graph: `value(node)` gives a value held whole,
    `run(node, args, kwargs, draw)` runs one node's op with torch (the executor's own),
    `coerce(node, value, type)` brings a result to the dtype the graph declares (shape
    checked against `type`), `draw_range(node, start, count)` gives a random node's draw
    over a range of its flat elements."""

    def __init__(self, plan: ChunkPlan, value, run, coerce, draw_range=None):
        self.plan, self.value, self.run, self.coerce, self.draw_range = plan, value, run, coerce, draw_range

    def run_sink(self, sink: Sink) -> dict:
        """The results of the sink and of the later sinks run with it (node -> value), a chunk
        at a time: the lazy values of chunk i are computed once for all of them."""
        members = [sink.node] + list(sink.fused)
        state: dict = {m: None for m in members}
        for i in range(sink.n):
            memo: dict = {}
            for m in members:
                step = self._gather_step if m.op == "aten.index" and m not in self.plan.lazy else self._put_step
                state[m] = step(m, i, sink.n, memo, state[m])
        return {m: (state[m][2] if m.op == "aten.index" and m not in self.plan.lazy else self._assembled(m, state[m]))
                for m in members}

    def _put_step(self, node: Node, i: int, n: int, memo: dict, outs):
        types = node.type if isinstance(node.type, tuple) else (node.type,)
        piece = self._compute(node, i, n, memo)
        parts = piece if isinstance(piece, (tuple, list)) else (piece,)
        if outs is None:
            outs = [torch.empty(ty.shape, dtype=p.dtype, device=p.device) if isinstance(ty, TensorType) and
                    torch.is_tensor(p) else None for ty, p in zip(types, parts)]
        for out, ty, p in zip(outs, types, parts):
            if out is not None:
                pc = block(tuple(ty.shape), n)
                out[block_index(tuple(ty.shape), pc, i)] = p.reshape(block_shape(tuple(ty.shape), pc))
        return outs

    @staticmethod
    def _assembled(node: Node, outs):
        return tuple(outs) if isinstance(node.type, tuple) else outs[0]

    def _piece(self, x: Node, i: int, n: int, memo: dict):
        if x not in memo:
            out = self._compute(x, i, n, memo)
            types = x.type if isinstance(x.type, tuple) else None
            if types is None:
                out = self.coerce(x, out, _piece_type(x.type, n))
            else:
                out = tuple(self.coerce(x, o, _piece_type(t, n)) if isinstance(t, TensorType) and torch.is_tensor(o)
                            else o for o, t in zip(out, tuple(types) + (None,) * (len(out) - len(types))))
            memo[x] = out
        return memo[x]

    def _held(self, a, shape: tuple, idx: tuple):
        """Operand `a` of a node of result `shape`, for the chunk at `idx`: a lazy value's
        chunk is computed by the caller; a value held whole is broadcast and sliced."""
        v = self.value(a) if isinstance(a, Node) else a
        if not torch.is_tensor(v) or v.dim() == 0:
            return v
        return v.expand(shape)[idx]

    def _compute(self, node: Node, i: int, n: int, memo: dict):
        lazy, kind, args, kwargs = self.plan.lazy, _kind(node), node.args, dict(node.kwargs)
        shape = _shape(node)
        pc = block(shape, n)
        idx = block_index(shape, pc, i)

        def operand(a, whole_shape=None, sl=None):
            if isinstance(a, Node) and a in lazy:
                return self._piece(a, i, n, memo)
            if whole_shape is None:
                return self._held(a, shape, idx)
            v = self.value(a) if isinstance(a, Node) else a
            return v[sl] if torch.is_tensor(v) else v
        if kind == "getitem":
            return operand(args[0])[args[1]]
        if kind == "fill":
            return self.run(node, (list(block_shape(shape, pc)),) + tuple(args[1:]), kwargs, None)
        if kind in ("flat", "softmax", "reduce"):
            xs = _shape(args[0])
            xpc = block(xs, n)
            x = operand(args[0], xs, block_index(xs, xpc, i))
            if node.op in FLAT:
                return x.reshape(block_shape(shape, pc))
            return self.run(node, (x,) + tuple(args[1:]), kwargs, None)
        if kind in ("pointwise", "dropout"):
            ins = tuple(operand(a) for a in args)
            kw = {k: operand(v) for k, v in kwargs.items()}
            draw = None
            if kind == "dropout" and self.draw_range is not None:
                e = math.prod(shape) // n
                draw = lambda: self.draw_range(node, i * e, e).reshape(block_shape(shape, pc))  # noqa: E731
            return self.run(node, ins, kw, draw)
        if kind == "matmul":
            batched = node.op in ("aten.bmm", "aten.baddbmm")
            k = 1 if node.op in ("aten.addmm", "aten.baddbmm") else 0
            a = operand(args[k], True, idx)
            b = operand(args[k + 1], True, idx[:1] if batched else slice(None))
            head = (operand(args[0]),) if k else ()
            return self.run(node, head + (a, b) + tuple(args[k + 2:]), kwargs, None)
        raise ValueError(f"{node.op} at %{node.name} is not run in chunks")

    def _gather_step(self, node: Node, i: int, n: int, memo: dict, state):
        """``index(x, [i0, i1, ...])`` over a lazy `x` chunked by rows: chunk i answers the
        indices that fall in its rows. `state`: (row indices, the other indices, the result)."""
        x = node.args[0]
        c = block(_shape(x), n)[1]
        if state is None:
            idx = [self.value(j) for j in node.args[1]]
            state = (torch.remainder(idx[0], _shape(x)[0]), idx[1:], None)
        i0, rest, out = state
        sel = (i0 >= i * c) & (i0 < (i + 1) * c)
        if bool(sel.any()) or (i == n - 1 and out is None):
            piece = self._piece(x, i, n, memo)
            part = self.run(node, (piece, [i0[sel] - i * c] + [j[sel] for j in rest]), dict(node.kwargs), None)
            if out is None:
                out = torch.empty((i0.shape[0],) + tuple(part.shape[1:]), dtype=part.dtype, device=part.device)
            out[sel] = part
        return i0, rest, out


def _piece_type(ty, n: int):
    if not isinstance(ty, TensorType):
        return ty
    shape = tuple(ty.shape)
    return TensorType(block_shape(shape, block(shape, n)), ty.dtype)
