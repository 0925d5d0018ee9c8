"""The relation vocabulary (DESIGN.md section 1), as layouts over the single-device tensor.

A relation answers, for rank r of N and a single-device tensor of a given shape, which
elements rank r holds (one index vector per dim, None = all of it), or says the ranks'
values sum (average, max, min) to it (Partial), or says nothing (Ignore).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ..ir.graph import Graph, Node, TensorType


class RelationError(ValueError):
    """An ill-formed or inconsistent relation (bad input, exit code 3)."""


def chunk_bounds(size: int, n: int, r: int) -> tuple[int, int]:
    """torch.chunk semantics: blocks of ceil(size/n), the last ones may be short or empty."""
    step = -(-size // n)
    return min(size, r * step), min(size, (r + 1) * step)


def layout_index(shape: Sequence[int], vecs) -> tuple:
    """A numpy index for a layout (per dim an index vector, None = all of it)."""
    return np.ix_(*[np.arange(s) if v is None else v for s, v in zip(shape, vecs)]) if len(shape) else ()


def held(array: np.ndarray, vecs) -> np.ndarray:
    """The elements of `array` a layout holds (`vecs` None: all of it). A position at or past
    a dim's end (a :class:`Padded` layout's padding) holds zero."""
    array = np.asarray(array)
    if vecs is None or not array.ndim:
        return array
    for d, v in enumerate(vecs):
        if v is not None and len(v) and int(np.max(v)) >= array.shape[d]:
            pad = [(0, 0)] * array.ndim
            pad[d] = (0, int(np.max(v)) + 1 - array.shape[d])
            array = np.pad(array, pad)
    return array[layout_index(array.shape, vecs)]


class Relation:
    def layout(self, shape: Sequence[int], rank: int, world: int) -> Optional[tuple]:
        """Index vectors rank `rank` holds, or None for non-layout relations."""
        raise NotImplementedError

    def local_shape(self, shape, rank, world) -> tuple[int, ...]:
        vecs = self.layout(shape, rank, world)
        if vecs is None:
            return tuple(shape)
        return tuple(s if v is None else len(v) for s, v in zip(shape, vecs))

    def check(self, shape, world) -> None:
        """Raise RelationError when the relation cannot apply to a tensor of `shape`."""


@dataclass(frozen=True)
class Replicate(Relation):
    def layout(self, shape, rank, world):
        return (None,) * len(shape)

    def __str__(self):
        return "Replicate()"


@dataclass(frozen=True)
class Shard(Relation):
    dim: int

    def check(self, shape, world):
        if not -len(shape) <= self.dim < len(shape):
            raise RelationError(f"Shard({self.dim}) names a dim the tensor of shape {list(shape)} does not have")

    def layout(self, shape, rank, world):
        self.check(shape, world)
        d = self.dim % len(shape)
        lo, hi = chunk_bounds(shape[d], world, rank)
        vecs = [None] * len(shape)
        if (lo, hi) != (0, shape[d]):
            vecs[d] = np.arange(lo, hi, dtype=np.int64)
        return tuple(vecs)

    def __str__(self):
        return f"Shard({self.dim})"


@dataclass(frozen=True)
class Interleaved(Relation):
    """Rank r holds [seg0_r | seg1_r | ...] along `dim`; `sizes` are the segment sizes of
    the single-device tensor (e.g. fused QKV: [q, k, v]). A segment with fewer blocks
    than ranks (GQA: fewer KV heads than ranks) gives each block to consecutive ranks:
    ``blocks`` optionally sets each segment's block count."""

    dim: int
    sizes: tuple
    blocks: tuple | None = None

    def check(self, shape, world):
        if not -len(shape) <= self.dim < len(shape):
            raise RelationError(f"Interleaved dim {self.dim} out of range for shape {list(shape)}")
        if sum(self.sizes) != shape[self.dim % len(shape)]:
            raise RelationError(f"Interleaved segment sizes {list(self.sizes)} sum to {sum(self.sizes)}, "
                                f"but dim {self.dim} has size {shape[self.dim % len(shape)]}")

    def layout(self, shape, rank, world):
        self.check(shape, world)
        parts, at = [], 0
        for i, size in enumerate(self.sizes):
            nb = world if self.blocks is None else self.blocks[i]
            if world % nb and nb % world:
                raise RelationError(f"Interleaved segment {i} has {nb} blocks, which does not fit {world} ranks")
            b = rank * nb // world if nb <= world else rank
            lo, hi = chunk_bounds(size, min(nb, world) if nb <= world else world, b)
            parts.append(np.arange(at + lo, at + hi, dtype=np.int64))
            at += size
        vecs = [None] * len(shape)
        vecs[self.dim % len(shape)] = np.concatenate(parts)
        return tuple(vecs)

    def __str__(self):
        extra = f", blocks={list(self.blocks)}" if self.blocks else ""
        return f"Interleaved({self.dim}, {list(self.sizes)}{extra})"


@dataclass(frozen=True)
class Padded(Relation):
    """`placement` applied to the single-device tensor lengthened along `dim`: the dim's
    `segments` ``[size, padded]`` or ``[size, padded, repeat]`` in turn (one segment: the
    whole dim), each block of `unit` positions of a segment repeated `repeat` times in place
    (repeat_interleave: GQA's k/v heads repeated to the query heads) and the segment then
    filled with zeros at its end up to `padded` positions (heads or ffn columns padded to a
    multiple of the ranks). ``Padded(Shard(1), 1, [[8192, 8196]])``: rank r holds block r
    of the 8196 columns, the last 4 of which are zero. The padding is exactly zero: a
    layout position at or past the dim's end (``size + j``) stands for it."""

    placement: Relation
    dim: int
    segments: tuple
    unit: int = 1

    def _segments(self):
        segs = self.segments
        if segs and not isinstance(segs[0], (list, tuple)):
            segs = (segs,)
        out = []
        for seg in segs:
            if len(seg) not in (2, 3):
                raise RelationError(f"a Padded segment is [size, padded] or [size, padded, repeat], not {list(seg)}")
            size, padded, repeat = (list(seg) + [1])[:3]
            if size % self.unit or size * repeat > padded:
                raise RelationError(f"Padded segment {list(seg)}: {size} positions (in blocks of {self.unit}) "
                                    f"repeated {repeat} times do not fit in {padded}")
            out.append((int(size), int(padded), int(repeat)))
        return out

    def check(self, shape, world):
        if not -len(shape) <= self.dim < len(shape):
            raise RelationError(f"Padded dim {self.dim} out of range for shape {list(shape)}")
        total = sum(s for s, _, _ in self._segments())
        if total != shape[self.dim % len(shape)]:
            raise RelationError(f"Padded segment sizes sum to {total}, but dim {self.dim} has size "
                                f"{shape[self.dim % len(shape)]}")
        if isinstance(self.placement, (Partial, Ignore, Padded)) or isinstance(self.placement, DERIVED):
            raise RelationError(f"Padded places the padded tensor by a layout, not by {self.placement}")

    def padding(self) -> int:
        """How many zeros the longest segment's padding holds (``size + j``, j below it)."""
        return max((padded - n * repeat for n, padded, repeat in self._segments()), default=0)

    def source(self, size: int) -> np.ndarray:
        """For each position of the padded dim, the single-device position it holds
        (``size + j`` for the j-th zero of a segment's padding)."""
        parts, at = [], 0
        for n, padded, repeat in self._segments():
            blocks = np.repeat(np.arange(n // self.unit, dtype=np.int64), repeat)
            parts.append(at + (blocks[:, None] * self.unit + np.arange(self.unit, dtype=np.int64)).ravel())
            parts.append(size + np.arange(padded - n * repeat, dtype=np.int64))
            at += n
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def layout(self, shape, rank, world):
        self.check(shape, world)
        d = self.dim % len(shape)
        src = self.source(shape[d])
        grown = tuple(len(src) if k == d else s for k, s in enumerate(shape))
        vecs = list(self.placement.layout(grown, rank, world))
        vecs[d] = src if vecs[d] is None else src[vecs[d]]
        if len(vecs[d]) == shape[d] and np.array_equal(vecs[d], np.arange(shape[d])):
            vecs[d] = None
        return tuple(vecs)

    def __str__(self):
        segs = [list(s) for s in self.segments] if self.segments and isinstance(self.segments[0], (list, tuple)) \
            else [list(self.segments)]
        extra = f", unit={self.unit}" if self.unit != 1 else ""
        return f"Padded({self.placement}, {self.dim}, {segs}{extra})"


@dataclass(frozen=True)
class Slices(Relation):
    dim: int
    ranges: dict = field(hash=False)

    def layout(self, shape, rank, world):
        if rank not in self.ranges:
            raise RelationError(f"Slices({self.dim}) gives no range for rank {rank}")
        lo, hi = self.ranges[rank]
        d = self.dim % len(shape)
        if not 0 <= lo <= hi <= shape[d]:
            raise RelationError(f"Slices range {lo}:{hi} is outside dim {self.dim} of size {shape[d]}")
        vecs = [None] * len(shape)
        vecs[d] = np.arange(lo, hi, dtype=np.int64)
        return tuple(vecs)

    def __str__(self):
        return f"Slices({self.dim}, {dict(sorted(self.ranges.items()))})"


@dataclass(frozen=True)
class Partial(Relation):
    op: str = "sum"

    def __post_init__(self):
        if self.op not in ("sum", "avg", "max", "min"):
            raise RelationError(f"Partial reduce op must be sum, avg, max or min, not {self.op!r}")

    def layout(self, shape, rank, world):
        return None

    def local_shape(self, shape, rank, world):
        return tuple(shape)

    def __str__(self):
        return f'Partial("{self.op}")'


@dataclass(frozen=True)
class Mesh(Relation):
    """A relation on a device mesh of `shape` (e.g. dp x tp): one placement per mesh axis,
    as DTensor states it. Rank r sits at ``unravel_index(r, shape)`` (the last axis varies
    fastest); placements apply axis by axis, each to the piece the earlier axes left
    (``Mesh((2, 2), (Shard(0), Replicate()))``: the batch split over dp, whole on each tp rank)."""
    shape: tuple
    placements: tuple

    def check(self, shape, world):
        if len(self.shape) != len(self.placements):
            raise RelationError(f"Mesh of shape {list(self.shape)} needs one placement per axis, "
                                f"got {len(self.placements)}")
        if int(np.prod(self.shape)) != world:
            raise RelationError(f"a mesh of shape {list(self.shape)} has {int(np.prod(self.shape))} ranks, "
                                f"but the world has {world}")
        for p in self.placements:
            if isinstance(p, (Partial, Ignore, Mesh, Padded)):
                raise RelationError(f"a Mesh placement must be Replicate, Shard, Interleaved or Slices, not {p}")

    def layout(self, shape, rank, world):
        self.check(shape, world)
        coords = np.unravel_index(rank, self.shape)
        vecs, cur = [None] * len(shape), list(shape)
        for placement, coord, n in zip(self.placements, coords, self.shape):
            for d, v in enumerate(placement.layout(tuple(cur), int(coord), n)):
                if v is not None:
                    vecs[d] = (np.arange(shape[d], dtype=np.int64) if vecs[d] is None else vecs[d])[v]
                    cur[d] = len(v)
        return tuple(None if v is not None and np.array_equal(v, np.arange(s)) else v for v, s in zip(vecs, shape))

    def __str__(self):
        return f"Mesh({list(self.shape)}, ({', '.join(map(str, self.placements))}))"


@dataclass(frozen=True)
class Ignore(Relation):
    def layout(self, shape, rank, world):
        return None

    def local_shape(self, shape, rank, world):
        raise RelationError("Ignore() gives no shape")

    def __str__(self):
        return "Ignore()"


@dataclass(frozen=True)
class LocalIds(Relation):
    """Ids local to each rank's block of a dim of `size` (vocab-parallel embeddings and
    cross-entropy): rank r holds ``where(ids < lo_r | ids >= hi_r, 0, ids - lo_r)`` of the
    single-device ids, with [lo_r, hi_r) its block as :class:`Shard` cuts ``range(size)``.
    Frameworks save these masked ids for the backward, which then reads them as inputs."""

    size: int

    def layout(self, shape, rank, world):
        return None

    def local_shape(self, shape, rank, world):
        return tuple(shape)

    def derivation(self, ids: TensorType, out: TensorType, rank: int, world: int) -> Graph:
        lo, _ = chunk_bounds(self.size, world, rank)
        g, x, outside = _outside_block(ids, ids, self.size, rank, world)
        local = _op(g, "aten.sub", (x, lo), ids)
        g.outputs["value"] = _op(g, "aten.masked_fill", (local, outside, 0), ids)
        return g

    def __str__(self):
        return f"LocalIds({self.size})"


@dataclass(frozen=True)
class OutsideBlock(Relation):
    """The mask ``ids < lo_r | ids >= hi_r`` of the single-device ids `ids` (a single-device
    input, default: the tensor this relation is of), viewed to this tensor's shape: true
    where rank r's block [lo_r, hi_r) of ``range(size)`` does not own the id. When the
    relation is of another single-device tensor than the ids, that tensor is the same mask
    over the whole range, which valid ids never leave: all false."""

    size: int
    ids: Optional[str] = None

    def layout(self, shape, rank, world):
        return None

    def local_shape(self, shape, rank, world):
        return tuple(shape)

    def derivation(self, ids: TensorType, out: TensorType, rank: int, world: int) -> Graph:
        g, _, outside = _outside_block(ids, out, self.size, rank, world)
        g.outputs["value"] = outside
        return g

    def __str__(self):
        return f"OutsideBlock({self.size}" + (f", ids={self.ids!r})" if self.ids else ")")


DERIVED = (LocalIds, OutsideBlock)
"""Relations that state a rank's tensor as a function of single-device ids (a
:meth:`derivation` program), not as a layout of a single-device tensor."""


def _op(graph: Graph, op: str, args: tuple, like: TensorType, name: str = "", dtype: str | None = None) -> Node:
    node = Node(name or f"t{len(graph.nodes)}", op, args, type=TensorType(like.shape, dtype or like.dtype))
    graph.nodes.append(node)
    return node


def _outside_block(ids: TensorType, out: TensorType, size: int, rank: int, world: int):
    """A program from input ``ids`` to the mask of ids outside rank's block (viewed to
    `out`'s shape): the graph, the (viewed) ids node and the mask node."""
    lo, hi = chunk_bounds(size, world, rank)
    g = Graph(label=f"ids outside [{lo}, {hi})")
    x = _op(g, "input", (), ids, name="ids")
    if tuple(out.shape) != tuple(ids.shape):
        x = _op(g, "aten.view", (x, list(out.shape)), TensorType(out.shape, ids.dtype))
    below = _op(g, "aten.lt", (x, lo), out, dtype="b8")
    above = _op(g, "aten.ge", (x, hi), out, dtype="b8")
    return g, x, _op(g, "aten.bitwise_or", (below, above), out, dtype="b8")


_NAMES = {"Replicate": Replicate, "Shard": Shard, "Partial": Partial, "Interleaved": Interleaved,
          "Slices": Slices, "Ignore": Ignore, "Mesh": Mesh,
          "LocalIds": LocalIds, "OutsideBlock": OutsideBlock, "Padded": Padded, "repl": Replicate, "replicate": Replicate}


def _build(node):
    """A relation (or a literal argument of one) from its parsed expression."""
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _NAMES:
            raise ValueError
        args = [_build(a) for a in node.args]
        kwargs = {k.arg: k.value.id if isinstance(k.value, ast.Name) else _build(k.value)  # ids=view_26: a tensor
                  for k in node.keywords}
        name = node.func.id
        if name == "Interleaved":
            args = [args[0], tuple(args[1])] + args[2:]
            if "blocks" in kwargs:
                kwargs["blocks"] = tuple(kwargs["blocks"])
        if name == "Mesh":
            args = [tuple(a) for a in args]
        if name == "Padded":
            args = args[:2] + [tuple(tuple(x) if isinstance(x, list) else x for x in args[2])] + args[3:]
        return _NAMES[name](*args, **kwargs)
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_build(e) for e in node.elts]
    return ast.literal_eval(node)


def parse_relation(text) -> Relation:
    """Parse ``Shard(0)``, ``Replicate()``, ``Interleaved(0, [8, 4, 4])``, ``cat 0``, ``repl``."""
    if isinstance(text, Relation):
        return text
    s = str(text).strip()
    m = re.fullmatch(r"cat\s+(-?\d+)", s)
    if m:
        return Shard(int(m.group(1)))
    if s in _NAMES:
        return _NAMES[s]()
    try:
        call = ast.parse(s, mode="eval").body
        if not isinstance(call, ast.Call):
            raise ValueError
        return _build(call)
    except RelationError:
        raise
    except Exception:
        raise RelationError(f"cannot read relation {s!r}{_did_you_mean(s)}; expected one of Replicate(), Shard(dim), "
                            f"Partial(\"sum\"), Interleaved(dim, [sizes]), Slices(dim, {{rank: (start, stop)}}), "
                            f"Mesh([sizes], (placement per axis)), Padded(placement, dim, [[size, padded]]), Ignore(), "
                            f"LocalIds(size), "
                            f"OutsideBlock(size, ids=NAME)") from None


def _did_you_mean(text: str) -> str:
    """`` (did you mean Shard(0)?)`` for a misspelt relation name, else ''."""
    import difflib
    m = re.match(r"\s*([A-Za-z_]\w*)", text)
    if not m or m.group(1) in _NAMES:
        return ""
    close = difflib.get_close_matches(m.group(1), list(_NAMES), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}{text[m.end():].strip() or '()'}?)" if close else ""
