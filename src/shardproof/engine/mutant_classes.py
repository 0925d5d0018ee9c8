"""Mutation operators for the defect classes of issue 14, which the original operators
(:mod:`.mutants`) never touch: a value-changing cast (a partial sum truncated to int or
bool before its reduction, a cast's target dtype changed), a rooted collective's root, a
collective's result read through a transposed (non-contiguous) buffer, a constant fill's
extent (local vs global), a loader's block (every rank block 0, the next rank's block),
class targets with ``ignore_index`` and per-rank ``all_to_all`` split sizes.

Each operator edits a deep copy of the captured graphs (or, for loaders and targets, the
input relations or example data the mutant is judged with) so that the mutant is a
plausible bug a user could write; :func:`.mutants.judge` then decides whether the proof
rules catch it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node, TensorType
from ..relations.spec import Shard, Slices
from .mutation_edits import ALL_RANKS, COLLECTIVE, REDUCING, Mutant, _edit, _insert_after, _set_arg, _waited, operator

CAST = "aten._to_copy"
FLOATS = ("f16", "bf16", "f32", "f64")
FILLS = ("aten.zeros", "aten.ones", "aten.full", "aten.new_zeros", "aten.new_ones", "aten.new_full")
ELEMENTWISE = ("aten.add", "aten.sub", "aten.rsub", "aten.mul", "aten.div", "aten.neg", "aten.exp", "aten.abs",
               "aten.pow", "aten.clone", CAST)
FULL_REDUCTIONS = ("aten.sum", "aten.mean")
IGNORE_INDEX = -100


def _every_rank(dist):
    return range(dist.world_size)


def _collectives(graph: Graph):
    return [(w, c) for w, c in _waited(graph, tuple({n.op for n in graph.nodes if n.op.startswith(COLLECTIVE)}))]


# ---------------------------------------------------------------- casts

def _retype(node: Node, dtype: str) -> None:
    node.kwargs = {**node.kwargs, "dtype": dtype}
    node.type = TensorType(node.type.shape, dtype)


@operator("cast-dtype")
def _cast_dtype(dist):
    """A cast's target dtype changed on every rank (a float cast made int64: truncation; an
    int cast made bool); and a partial sum cast to int64 (or bool) and back before its
    reduction (the sum of truncations is not the truncation of the sum)."""
    g0 = dist.graphs[0]
    for n in g0.nodes:
        if n.op != CAST or not isinstance(n.type, TensorType) or "dtype" not in n.kwargs:
            continue
        new = "i64" if n.type.dtype in FLOATS else "b8" if n.type.dtype != "b8" else None
        if new is None:
            continue
        yield Mutant("cast-dtype", f"{n.name} casts to {new} instead of {n.type.dtype}", n.name, ALL_RANKS,
                     _edit(dist, _every_rank(dist), lambda g, r, name=n.name, new=new: _retype(g.node(name), new)))
    for i, (_, coll) in enumerate(_waited(g0, REDUCING)):
        x = coll.args[0]
        if not isinstance(x, Node) or not isinstance(x.type, TensorType) or x.type.dtype not in FLOATS:
            continue
        for via in ("i64", "b8")[:2 if i == 0 else 1]:
            def truncate(g, r, name=coll.name, via=via):
                c = g.node(name)
                src = c.args[0]
                down = Node(f"{name}_as_{via}", CAST, (src,), {"dtype": via}, TensorType(src.type.shape, via), c.source)
                back = Node(f"{name}_as_{via}_back", CAST, (down,), {"dtype": src.type.dtype}, src.type, c.source)
                at = g.nodes.index(c)
                g.nodes[at:at] = [down, back]
                _set_arg(c, 0, back)
            yield Mutant("cast-dtype", f"the partial input of {coll.name} cast to {via} and back before it", coll.name,
                         ALL_RANKS, _edit(dist, _every_rank(dist), truncate))


# ---------------------------------------------------------------- rooted collectives

@operator("root-rank")
def _root_rank(dist):
    """A broadcast's root moved to the next rank of its group (a src given as a group rank
    where a global one was meant, or the owner mistaken)."""
    for _, coll in _waited(dist.graphs[0], (COLLECTIVE + "broadcast",)):
        src, group = coll.args[1], tuple(coll.args[-1])
        if not isinstance(src, int) or len(group) < 2:
            continue
        new = (src + 1) % len(group)
        yield Mutant("root-rank", f"{coll.name} broadcasts from group rank {new} instead of {src}", coll.name,
                     ALL_RANKS, _edit(dist, _every_rank(dist), lambda g, r, name=coll.name, new=new:
                                      _set_arg(g.node(name), 1, new)))


# ---------------------------------------------------------------- buffers

@operator("buffer-layout")
def _buffer_layout(dist):
    """A collective's result received into a transposed (non-contiguous) buffer, which the
    backend fills as if it were contiguous: the data read back through the buffer's
    strides is the result's storage reshaped to the reversed shape and permuted back."""
    for wait, coll in _collectives(dist.graphs[0]):
        t = wait.type
        if not isinstance(t, TensorType) or sum(s > 1 for s in t.shape) < 2:
            continue
        rev = tuple(reversed(t.shape))

        def transpose(g, r, name=wait.name, t=t, rev=rev):
            w = g.node(name)
            if w.type != t:
                return False
            raw = Node(f"{name}_raw", "aten.view", (w, list(rev)), {}, TensorType(rev, t.dtype), w.source)
            seen = Node(f"{name}_strided", "aten.permute", (raw, list(reversed(range(len(rev))))), {}, t, w.source)
            _insert_after(g, w, [raw, seen])
        yield Mutant("buffer-layout", f"{coll.op.split('.')[-1]} into {wait.name} received into a transposed buffer",
                     wait.name, ALL_RANKS, _edit(dist, _every_rank(dist), transpose))


# ---------------------------------------------------------------- constant fills

def _fill_chain(graph: Graph, fill: Node, users: dict) -> list[Node] | None:
    """The fill, then the elementwise ops (one user each, other operands scalars) that carry
    its shape, up to a full reduction (e.g. ``(1 - zeros(b, s)).sum()``, a token count);
    None when the fill's shape flows anywhere else."""
    chain, n = [fill], fill
    while True:
        nxt = users[n]
        if len(nxt) != 1:
            return None
        u = nxt[0]
        if u.op in FULL_REDUCTIONS and len(u.args) == 1:
            return chain
        if u.op not in ELEMENTWISE or any(isinstance(a, Node) and a is not n for a in u.args):
            return None
        chain.append(u)
        n = u


@operator("fill-extent")
def _fill_extent(dist):
    """A constant fill reduced to a count (a loss normalizer) built with the local extent
    where the global one was meant, or the reverse, along its last dim longer than 1."""
    g0, world = dist.graphs[0], dist.world_size
    users = g0.users()
    for n in g0.nodes:
        shape_at = 1 if n.op.startswith("aten.new_") else 0
        if n.op not in FILLS or len(n.args) <= shape_at or not isinstance(n.args[shape_at], (list, tuple)):
            continue
        chain = _fill_chain(g0, n, users)
        shape = list(n.args[shape_at])
        d = next((i for i in reversed(range(len(shape))) if shape[i] > 1), None)  # the last: a sequence, mostly
        if chain is None or d is None:
            continue
        new = shape[d] // world if shape[d] % world == 0 else shape[d] * world
        names = [c.name for c in chain]

        def resize(g, r, names=names, d=d, new=new, at=shape_at):
            nodes = [g.node(x) for x in names]
            size = list(nodes[0].args[at])
            size[d] = new
            _set_arg(nodes[0], at, type(nodes[0].args[at])(size))
            for x in nodes:
                x.type = TensorType(tuple(size), x.type.dtype)
        yield Mutant("fill-extent", f"{n.name} filled with extent {new} instead of {shape[d]} along dim {d}", n.name,
                     ALL_RANKS, _edit(dist, _every_rank(dist), resize))


# ---------------------------------------------------------------- loaders

def _blocks(dist, name: str, dim: int) -> list[tuple[int, int]] | None:
    """Each rank's (start, stop) along `dim` of input `name` under Shard(dim), from the
    ranks' local shapes; None when a rank lacks it."""
    bounds, lo = [], 0
    for g in dist.graphs:
        node = next((n for n in g.inputs if n.name == name), None)
        if node is None or not isinstance(node.type, TensorType) or not node.type.shape:
            return None
        size = node.type.shape[dim % len(node.type.shape)]
        bounds.append((lo, lo + size))
        lo += size
    return bounds


@operator("loader-block", context=True)
def _loader_block(dist, bindings, examples):
    """A sharded input loaded wrong: every rank loads block 0, or each rank the next rank's
    block (the program is the same; the input's relation is the loader's mistake)."""
    world = dist.world_size
    for name, b in bindings.items():
        if not isinstance(b.relation, Shard) or world < 2:
            continue
        bounds = _blocks(dist, name, b.relation.dim)
        if bounds is None or len({hi - lo for lo, hi in bounds}) != 1:
            continue
        for what, pick in (("every rank loads block 0", lambda r: 0),
                           ("each rank loads the next rank's block", lambda r: (r + 1) % world)):
            wrong = dict(bindings)
            wrong[name] = dataclasses.replace(b, relation=Slices(b.relation.dim, {r: bounds[pick(r)]
                                                                                for r in range(world)}), how="mutant")
            yield Mutant("loader-block", f"{name}: {what}", name, ALL_RANKS, dist, bindings=wrong)


# ---------------------------------------------------------------- targets

@operator("ignore-index", context=True)
def _ignore_index(dist, bindings, examples):
    """Class targets in the example data with some entries ``ignore_index`` (-100), as a
    padded batch has them: a program that does not mask them differs from
    ``cross_entropy``, which skips them."""
    for name, values in examples.items():
        v = np.asarray(values)
        if not np.issubdtype(v.dtype, np.integer) or v.size < 2 or v.min() < 0 or \
                not any(k in name.lower() for k in ("target", "label")):
            continue
        padded = v.copy()
        flat = padded.reshape(-1)
        flat[::2] = IGNORE_INDEX
        yield Mutant("ignore-index", f"{name} holds ignore_index ({IGNORE_INDEX}) at every other position", name,
                     ALL_RANKS, dist, examples={**examples, name: padded})


# ---------------------------------------------------------------- split sizes

@operator("split-sizes")
def _split_sizes(dist):
    """Rank 0 sends one row more to its first peer and one less to its second than the
    peers expect to receive (per-rank split sizes out of step)."""
    for _, coll in _waited(dist.graphs[0], (COLLECTIVE + "all_to_all_single",)):
        sizes = coll.args[2]
        if not isinstance(sizes, (list, tuple)) or len(sizes) < 2 or sizes[1] < 1:
            continue
        moved = type(sizes)([sizes[0] + 1, sizes[1] - 1, *sizes[2:]])
        yield Mutant("split-sizes", f"{coll.name} on rank 0 sends {list(moved)} instead of {list(sizes)}", coll.name,
                     (0,), _edit(dist, [0], lambda g, r, name=coll.name, moved=moved: _set_arg(g.node(name), 2, moved)))

