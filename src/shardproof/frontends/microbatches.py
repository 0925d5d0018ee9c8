"""Microbatch loops traced flat in M (issue 16): a rank's gradient-accumulation loop is
traced with the fewest microbatches that contain each distinct microbatch program once, and
the graph of the real loop (all M microbatches) is derived from that trace by repeating the
generic body.

Soundness rests on eager records, as for rank classes (rank_classes.py): the rank's step is
run eagerly with M microbatches (its fingerprint's run, which records the loop too) and with
the reduced count M' (its batch: the first M' microbatch slices of its own batch), each under
:class:`MicrobatchRecord`, which records
every ATen op per segment -- before the loop, each microbatch, after the loop -- with where
each tensor argument came from, relative to the segment: its own earlier op, the previous
microbatch's op (the accumulator), an op before the loop (``"m"`` where it is the output of
a multi-output op at the microbatch's own index: the microbatch's slice of the batch, an
arithmetic progression over the loop), or an input by position. Any other reference (an
older microbatch's tensor) rules the loop out. Microbatches ``t .. M-2`` (and ``M-1`` unless
it differs) must record one program (the generic body), microbatches before ``t`` and an
odd last one are traced as themselves, and the reduced run's segments must equal the full
run's one for one (the loop's prefix and tail included, the number of slices abstracted):
then the full program's op sequence is the reduced one's with the generic body repeated.

The derived fx graph is built from the reduced trace in the full program's order (fresh
node names, as a trace would name them), it is run once on the full inputs against the eager
outputs (a derivation slip, e.g. a shape baked into the trace, is refused) and that run gives
its types and layouts, and its collectives must be the full record's. Whatever fails falls back to tracing the whole loop (``None``).

The proof concludes the generic microbatches after three of them by induction where that
proves the step (engine/induction.py), else it interprets every microbatch; the capture is
cheaper, not flat in M (bench/README.md sections 9 and 10).
"""
from __future__ import annotations

import copy
import hashlib
import operator
import re
from dataclasses import dataclass, replace

import torch

from .rank_classes import OpRecord, _collectives, _current_microbatch, fingerprint_step, walk_args
from .torch_capture import fake_world, from_fx
from .torch_collectives import functional_collectives
from .torch_p2p import PIPELINE_META, attach_events

MIN_SAVED = 2  # derive only where at least this many microbatches are not traced (bench: deriving one
# costs more than tracing it -- two eager records, the meta run, the derived graph)
ENABLED = True  # False: every microbatch traced (the bench's baseline)


@dataclass
class LoopRecord:
    """A finished :class:`MicrobatchRecord`: plain data (it travels to capture workers)."""
    segments: dict
    unsupported: str | None
    count: int
    groups: list

    def bodies(self) -> list[str] | None:
        """Each microbatch's program (a string key), in order; None where the loop is not one
        of `count` microbatches run in order."""
        if self.unsupported or sorted(k for k in self.segments if isinstance(k, int)) != list(range(self.count)):
            return None
        return [repr(self.segments[m]) for m in range(self.count)]


class MicrobatchRecord(OpRecord):
    """Ops per segment (``"pre"``, a microbatch index, ``"post"``), tensors referenced
    relative to the segment (module doc); `unsupported` says why a loop cannot be derived.
    It is an :class:`OpRecord` too (the rank's fingerprint): one eager run, one walk of each
    op's arguments, gives both -- the key and the microbatch keys are computed from the
    segments at the end (:meth:`key`, :meth:`microbatch_keys`)."""

    def __init__(self, inputs: list, count: int):
        super().__init__(inputs)
        self._where = {id(t): ("in", i) for i, t in enumerate(inputs)}
        self.count = count
        self.segments: dict = {"pre": []}
        self.unsupported: str | None = None
        self._ctx = "pre"
        self._last = None  # the latest microbatch begun
        self._runs: list = []  # [segment, ops] per run of consecutive ops in one segment: the program order
        self._split: set = set()  # microbatches whose ops are not one run

    def _segment(self, mb):
        if mb is None:
            return "pre" if self._last is None else "post"
        if "post" in self.segments or mb not in (self._last, 0 if self._last is None else self._last + 1):
            self.unsupported = self.unsupported or f"microbatch {mb} runs out of order or after the loop"
        self._last = mb
        return mb

    def key(self) -> str:
        """The program: every op in order (the runs of segments and each segment's ops, every
        tensor named by segment, op and output: :meth:`_loop_ref` is one-to-one given the
        segment), as :meth:`OpRecord.key` tells programs apart."""
        return hashlib.blake2b(repr((self._runs, self.segments)).encode(), digest_size=20).hexdigest()

    def microbatch_keys(self) -> dict:
        """Per microbatch, its ops with tensors of other segments as ``"outer"`` (inputs by
        position, its own by op and output), as :meth:`OpRecord.microbatch_keys`; a
        microbatch whose ops are not one run keeps a key of its own."""
        def local(r):
            return r if r[0] in ("in", "self") else "outer"
        out = {}
        for mb, ops in self.segments.items():
            if isinstance(mb, int):
                body = repr([(op, _map_refs(a, local), _map_refs(k, local)) for op, a, k, _ in ops])
                out[mb] = hashlib.blake2b((body + (f"split {mb}" if mb in self._split else "")).encode(),
                                          digest_size=20).hexdigest()
        return out

    def _loop_ref(self, t):
        where = self._where.get(id(t))
        if where is None:  # made outside the dispatcher: by value
            return self._ref(t, None)
        seg, ctx = where[0], self._ctx
        if seg == "in" or seg == ctx:
            return Ref(where if seg == "in" else ("self",) + where[1:])
        if seg == "pre":
            i, j = where[1:]
            multi = self.segments["pre"][i][3] == "M"
            return Ref(("pre", i, "m" if isinstance(ctx, int) and multi and j == ctx else j))
        if isinstance(ctx, int) and seg == ctx - 1:
            return Ref(("prev",) + where[1:])
        if ctx == "post" and seg == self._last:
            return Ref(("last",) + where[1:])
        self.unsupported = self.unsupported or f"segment {ctx} reads a tensor of microbatch {seg}"
        return Ref(("abs",) + where)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out, op, args = self._call(func, args, kwargs)
        seg = self._ctx = self._segment(_current_microbatch())
        ops = self.segments.setdefault(seg, [])
        if self._runs and self._runs[-1][0] == seg:
            self._runs[-1][1] += 1
        else:
            if any(s == seg for s, _ in self._runs) and isinstance(seg, int):
                self._split.add(seg)
            self._runs.append([seg, 1])
        outs = out if isinstance(out, (tuple, list)) else (out,)
        many = "M" if seg == "pre" and isinstance(out, (tuple, list)) and len(out) == self.count else len(outs)
        ops.append((op, walk_args(args, self._loop_ref), walk_args(kwargs, self._loop_ref), many))
        for j, t in enumerate(outs):
            if isinstance(t, torch.Tensor):
                self._where[id(t)] = (seg, len(ops) - 1, j)
                self._keep.append(t)  # alive: ids are not reused
        return out

    def finish(self, inputs: dict, names: list, outs: list, events: list, program) -> tuple:
        """(loop record, step inputs, output names, eager outputs, events, the returned
        tensors' references, the microbatch dim) of the run recorded."""
        self._ctx = "post"
        returned = tuple(self._loop_ref(o) if isinstance(o, torch.Tensor) else repr(o) for o in outs)
        record = LoopRecord(self.segments, self.unsupported, self.count, list(self.groups))
        return record, inputs, list(names), outs, list(events), returned, getattr(program, "microbatch_dim", 0)


class Ref(tuple):
    """A tensor argument's reference in a :class:`MicrobatchRecord` (``("self", op, output)``,
    ``("prev", ...)``, ...): a tuple, told apart from an argument's own tuples by its type."""
    __slots__ = ()


def _map_refs(record, fn):
    """A walked argument record (walk_args) with each tensor reference (:class:`Ref`) mapped by `fn`."""
    if type(record) is Ref:
        return fn(record)
    if type(record) is tuple:
        return tuple([_map_refs(x, fn) for x in record])
    return record


def loop_record(train):
    """The record a fingerprint's eager run uses to record the loop too (None where no loop
    is derived: fewer than 3 microbatches, or the rule off)."""
    count = getattr(train, "microbatches", 1) or 1
    if count < 3 or not ENABLED:
        return None
    return lambda values: MicrobatchRecord(values, count)


def plan(keys: list[str]) -> tuple[int, bool] | None:
    """(t, odd_last) for microbatch programs `keys`: microbatches t..M-2 (and M-1 unless
    odd_last) run one program, the first t are traced as themselves; None where fewer than
    MIN_SAVED microbatches would be derived."""
    count = len(keys)
    if count < 3:
        return None
    odd_last = keys[-1] != keys[-2]
    end = count - 2 if odd_last else count - 1
    t = end
    while t > 0 and keys[t - 1] == keys[end]:
        t -= 1
    traced = t + 1 + odd_last
    return (t, odd_last) if count - traced >= MIN_SAVED else None


def source_of(k: int, count: int, t: int, odd_last: bool) -> int:
    """The traced microbatch (of the reduced run) microbatch `k` of the full loop repeats."""
    if k <= t:
        return k
    return t + 1 if odd_last and k == count - 1 else t


# ---------------------------------------------------------------- eager records

def _record(make_program, rank: int, world: int, data: dict, train):
    """:meth:`MicrobatchRecord.finish` of rank `rank`'s step run eagerly; None where the
    program is not a plain training step (the fingerprint's run: rank_classes.py)."""
    count = train.microbatches
    fp = fingerprint_step(make_program, rank, world, data, train, routed=True,
                          loop=lambda values: MicrobatchRecord(values, count))
    return fp.loop if fp is not None else None


def reduced_data(data: dict, count: int, reduced: int, dim: int) -> dict | None:
    """The first `reduced` of `count` equal microbatch slices of every batched input (along
    `dim`); inputs without that dim are kept whole (the records decide)."""
    out = {}
    for name, v in data.items():
        if isinstance(v, torch.Tensor) and v.dim() > dim and v.shape[dim] % count == 0 and v.shape[dim] >= count:
            out[name] = v.narrow(dim, 0, v.shape[dim] // count * reduced).clone()
        else:
            out[name] = v
    return out


def _same_records(full, small, t: int, odd_last: bool) -> bool:
    a, b = full[0], small[0]
    keys_a, keys_b = a.bodies(), b.bodies()
    if keys_b is None or a.segments["pre"] != b.segments["pre"] or a.segments.get("post") != b.segments.get("post"):
        return False
    if keys_b[:t + 1] != keys_a[:t + 1] or (odd_last and keys_b[t + 1] != keys_a[-1]) or full[5] != small[5]:
        return False
    shapes = [(n, v.dtype) for n, v in full[1].items()] == [(n, v.dtype) for n, v in small[1].items()]
    return shapes and full[2] == small[2]


# ---------------------------------------------------------------- the derived fx graph

def _segments(gm, count: int):
    """(placeholders, pre, bodies, post) fx nodes of the reduced trace; None where the
    marked microbatches are not contiguous and in order."""
    phs, pre, post, bodies = [], [], [], [[] for _ in range(count)]
    last = -1
    for n in gm.graph.nodes:
        if n.op == "output":
            continue
        if n.op == "placeholder":
            phs.append(n)
            continue
        where = (n.meta.get("custom") or {}).get(PIPELINE_META)
        mb = where[1] if isinstance(where, tuple) and where[0] is None else None
        if mb is None:
            (pre if last < 0 else post).append(n)
        elif post or mb < last or mb > last + 1 or mb >= count:
            return None
        else:
            last = mb
            bodies[mb].append(n)
    return (phs, pre, bodies, post) if last == count - 1 and all(bodies) else None


def _sliced(pre: list, reduced: int) -> dict | None:
    """Multi-output nodes before the loop with one getitem per microbatch (0..M'-1), right
    after them: node -> its getitems in order; None where such getitems are not contiguous."""
    out = {}
    for i, n in enumerate(pre):
        val = n.meta.get("val")
        if not isinstance(val, (list, tuple)) or len(val) != reduced:
            continue
        items = pre[i + 1:i + 1 + reduced]
        if [(g.target, g.args) for g in items] != [(operator.getitem, (n, j)) for j in range(reduced)]:
            return None
        if any(u.target is operator.getitem and u not in items for u in n.users):
            return None
        out[n] = items
    return out


def _base_name(n) -> str:
    """The name a trace would give the node before de-duplication (make_fx: the op's)."""
    if n.op == "placeholder":
        return n.name
    packet = getattr(n.target, "overloadpacket", None)
    return packet.__name__ if packet is not None else re.sub(r"_\d+$", "", n.name)


def derive_loop(gm, count: int, reduced: int, t: int, odd_last: bool):
    """The full loop's fx GraphModule from the reduced trace `gm` (``None`` where a node
    references what the rule does not cover)."""
    segs = _segments(gm, reduced)
    if segs is None:
        return None
    phs, pre, bodies, post = segs
    sliced = _sliced(pre, reduced)
    if sliced is None:
        return None
    slot = {g: (src, j) for src, items in sliced.items() for j, g in enumerate(items)}
    body_of = {n: (m, p) for m, nodes in enumerate(bodies) for p, n in enumerate(nodes)}
    graph = torch.fx.Graph()
    env: dict = {}
    slices: dict = {}
    made: list = []  # the new microbatches' nodes, in order

    def copy_node(n, mapped, mb=None):
        new = graph.create_node(n.op, n.target, mapped(n.args), mapped(n.kwargs), name=_base_name(n))
        new.meta = copy.copy(n.meta)
        if mb is not None:
            new.meta["custom"] = {**(n.meta.get("custom") or {}), PIPELINE_META: (None, mb)}
        return new

    def outer(a, k=None, s=None):
        if a in slot:
            src, j = slot[a]
            return slices[src][k if k is not None and j == s else j]
        if a in env:
            return env[a]
        raise KeyError(a)

    def mapper(fn):
        return lambda args: torch.fx.node.map_arg(args, fn)

    try:
        for n in phs:
            env[n] = copy_node(n, mapper(outer))
        for n in pre:
            if n in slot:
                continue
            env[n] = copy_node(n, mapper(outer))
            if n in sliced:
                slices[n] = [graph.create_node("call_function", operator.getitem, (env[n], j), name="getitem")
                             for j in range(count)]
                for j, g in enumerate(slices[n]):
                    g.meta = copy.copy(sliced[n][min(j, reduced - 1)].meta)
        for k in range(count):
            s = source_of(k, count, t, odd_last)
            local: dict = {}

            def arg(a, k=k, s=s, local=local):
                if a in local:
                    return local[a]
                m, p = body_of.get(a, (None, None))
                if m is None:
                    return outer(a, k, s)
                if m != s - 1 or k == 0:
                    raise KeyError(a)
                prev_source = source_of(k - 1, count, t, odd_last)
                if prev_source != m and [x.target for x in bodies[prev_source]] != [x.target for x in bodies[m]]:
                    raise KeyError(a)  # the previous microbatch is not aligned with the one traced
                return made[k - 1][p]
            nodes = []
            for n in bodies[s]:
                local[n] = copy_node(n, mapper(arg), k)
                nodes.append(local[n])
            made.append(nodes)

        def tail(a):
            m, p = body_of.get(a, (None, None))
            if m is None:
                return outer(a)
            if m != reduced - 1:
                raise KeyError(a)
            return made[-1][p]
        for n in post:
            env[n] = copy_node(n, mapper(tail))
        out = next(n for n in gm.graph.nodes if n.op == "output")
        graph.output(torch.fx.node.map_arg(out.args[0], tail))
    except KeyError:
        return None
    graph.lint()
    from torch.fx._lazy_graph_module import _make_graph_module, _use_lazy_graph_module
    with _use_lazy_graph_module(True):  # its code is generated only if it is called (it is interpreted)
        return _make_graph_module(gm, graph)


def _meta_copy(value):
    """`value` with each tensor a meta tensor of its dtype, shape and strides (a node's
    ``meta["val"]``: from_fx reads its type)."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_meta_copy(v) for v in value)
    return value


def _same_type(old, new) -> bool:
    """Whether a node's recorded value has the shapes and dtypes of `new` (tensors, or lists
    and tuples of tensors, alone)."""
    if isinstance(new, torch.Tensor):
        return isinstance(old, torch.Tensor) and old.shape == new.shape and old.dtype == new.dtype
    if isinstance(new, (list, tuple)) and new:
        return isinstance(old, (list, tuple)) and len(old) == len(new) and all(map(_same_type, old, new))
    return False


class _TypedRun(torch.fx.Interpreter):
    """The derived module run on the full inputs: every node's ``meta["val"]`` and storage
    layout (strides, offset) from its eager value, as the eager step computes them."""

    def __init__(self, gm):
        super().__init__(gm)
        self.layouts: dict = {}

    def run_node(self, n):
        out = super().run_node(n)
        if not _same_type(n.meta.get("val"), out):  # (from_fx reads a value's shape and dtype)
            n.meta["val"] = _meta_copy(out)
        if isinstance(out, torch.Tensor) and out.layout == torch.strided:
            self.layouts[n] = (tuple(int(x) for x in out.stride()), int(out.storage_offset()))
        return out


def _typed_run(gm, values: list, outs: list) -> dict | None:
    """One run of the derived module on the full inputs (inside the rank's fake world, its
    process groups made): its nodes typed and their layouts (fx node -> (strides, offset)),
    None where it fails or its outputs are not the eager step's (a derivation slip)."""
    run = _TypedRun(gm)
    try:
        got = run.run(*values)
    except Exception:  # noqa: BLE001  (the loop is then traced whole)
        return None
    if len(got) != len(outs):
        return None
    for a, b in zip(got, outs):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.shape != b.shape or not torch.allclose(
                    a.double(), b.double(), rtol=1e-5, atol=1e-7, equal_nan=True):
                return None
    return run.layouts


# ---------------------------------------------------------------- capture

def capture_loop(make_program, rank: int, world: int, data: dict, train, events: bool = False,
                 keep: dict | None = None, full: tuple | None = None):
    """``(graph, inputs, info)`` of rank `rank`'s step, its microbatch loop traced reduced
    and derived (module doc); None where the rule does not apply (trace the loop whole).
    `info`: ``{"microbatches", "traced", "generic", "derived"}`` for the report. `full`: the
    rank's loop record from its fingerprint's eager run (rank_classes.py), else run here."""
    count = getattr(train, "microbatches", 1) or 1
    if count < 3 or not ENABLED:
        return None
    with functional_collectives():
        full = full or _record(make_program, rank, world, data, train)
        keys = full[0].bodies() if full else None
        shape = plan(keys) if keys else None
        if shape is None:
            return None
        t, odd_last = shape
        reduced = t + 1 + odd_last
        small_data = reduced_data(data, count, reduced, full[6])
        small_train = replace(train, microbatches=reduced)
        small = _record(make_program, rank, world, small_data, small_train)
    if small is None or not _same_records(full, small, t, odd_last):
        return None
    from . import torch_train as tt
    kept: dict = {"ir": False}  # the reduced trace's fx module and stated relations only (no IR graph)
    traced, _ = tt.capture_rank_step(make_program, rank, world, small_data, small_train, False, kept)
    gm = derive_loop(kept["gm"], count, reduced, t, odd_last)
    if gm is None:
        return None
    with fake_world(rank, world), functional_collectives():
        make_program(rank, world)  # its process groups, named as when it was traced
        layouts = _typed_run(gm, list(full[1].values()), full[3])
        if layouts is None:
            return None
        graph = from_fx(gm.graph, list(full[1]), full[2], f"rank {rank}", layouts)
    if [tuple(n.args[-1]) for n in _collectives(graph)] != full[0].groups:
        return None
    attach_events(graph, full[4], gm.graph)
    graph.stated, graph.stated_inputs = dict(traced.stated), dict(traced.stated_inputs)
    if events:
        from .torch_events import rank_events
        graph.events = rank_events(graph, rank)
    if keep is not None:
        keep["gm"] = gm
    derived = [k for k in range(count) if k > t and not (odd_last and k == count - 1)]
    info = {"microbatches": count, "traced": list(range(t + 1)) + ([count - 1] if odd_last else []),
            "generic": t, "derived": derived}
    return graph, full[1], info


def capture_rank(make_program, rank: int, world: int, data: dict, train, events: bool = False,
                 keep: dict | None = None, full: tuple | None = None):
    """(graph, inputs, info) with the loop derived where :func:`capture_loop` applies, else
    the whole step traced (info None). `full`: see :func:`capture_loop`."""
    got = capture_loop(make_program, rank, world, data, train, events, keep, full)
    if got is not None:
        return got
    from . import torch_train as tt
    graph, inputs = tt.capture_rank_step(make_program, rank, world, data, train, events, keep)
    return graph, inputs, None


