"""Value matching: the layouts under which every rank's tensor is a piece of a
single-device tensor. Every slice of a rank's tensor is located inside the single-device
one, so Replicate, Shard, Slices and Interleaved (fused QKV, GQA) and two-axis meshes are
recovered exactly; each proposed layout is re-checked element by element. Where the values
repeat (a constant bias, a 0/1 mask), several layouts fit: :func:`candidate_relations`
lists them, so no caller picks one silently.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Optional

import numpy as np

from .spec import Interleaved, Mesh, Relation, RelationError, Replicate, Shard, Slices, chunk_bounds, held


def _slab_positions(whole: np.ndarray, local: np.ndarray, dim: int, start_hint: int) -> Optional[np.ndarray]:
    """For each index of `local` along `dim`, an index of `whole` holding the same slab,
    preferring contiguous runs beginning at `start_hint` (ties: equal slabs)."""
    w = np.moveaxis(whole, dim, 0).reshape(whole.shape[dim], -1)
    loc = np.moveaxis(local, dim, 0).reshape(local.shape[dim], -1)
    table: dict[bytes, list[int]] = defaultdict(list)
    for i, row in enumerate(w):
        table[np.ascontiguousarray(row).tobytes()].append(i)
    out, prev = [], start_hint - 1
    for row in loc:
        cands = table.get(np.ascontiguousarray(row).tobytes())
        if not cands:
            return None
        pick = prev + 1 if prev + 1 in cands else next((c for c in cands if c > prev), cands[0])
        out.append(pick)
        prev = pick
    return np.asarray(out, dtype=np.int64)


def _runs(pos: np.ndarray) -> list[tuple[int, int]]:
    runs, lo = [], None
    for i, p in enumerate(pos):
        if lo is None:
            lo = p
        elif p != pos[i - 1] + 1:
            runs.append((int(lo), int(pos[i - 1]) + 1))
            lo = p
    if lo is not None:
        runs.append((int(lo), int(pos[-1]) + 1))
    return runs


def _layout_from_positions(per_rank: list[np.ndarray], size: int, dim: int, world: int) -> Optional[Relation]:
    if all(np.array_equal(p, np.arange(*chunk_bounds(size, world, r))) for r, p in enumerate(per_rank)):
        return Shard(dim)
    runs = [_runs(p) for p in per_rank]
    if all(len(r) == 1 for r in runs):
        return Slices(dim, {r: rs[0] for r, rs in enumerate(runs)})
    k = len(runs[0])
    if any(len(r) != k for r in runs):
        return None
    sizes, blocks = [], []
    for j in range(k):
        seg = sorted(set(r[j] for r in runs))
        if any(a[1] != b[0] for a, b in zip(seg, seg[1:])):
            return None
        sizes.append(seg[-1][1] - seg[0][0])
        blocks.append(len(seg))
    rel = Interleaved(dim, tuple(sizes), None if all(b == world for b in blocks) else tuple(blocks))
    try:
        want = [rel.layout((1,) * dim + (size,), r, world)[dim] for r in range(world)]
    except RelationError:
        return None
    if not all(np.array_equal(w, p) for w, p in zip(want, per_rank)):
        return None
    return rel


def _holds(rel: Relation, whole: np.ndarray, locals_: list[np.ndarray]) -> bool:
    world = len(locals_)
    for r, loc in enumerate(locals_):
        try:
            vecs = rel.layout(whole.shape, r, world)
        except RelationError:
            return False
        part = held(whole, vecs)
        if part.shape != loc.shape or not np.array_equal(part, loc):
            return False
    return True


def relation_by_value(whole: np.ndarray, locals_: list[np.ndarray]) -> Optional[Relation]:
    """The relation under which every rank's tensor is a piece of `whole`, or None."""
    world = len(locals_)
    if any(loc.ndim != whole.ndim for loc in locals_):
        return None
    if _holds(Replicate(), whole, locals_):
        return Replicate()
    differing = {d for loc in locals_ for d in range(whole.ndim) if loc.shape[d] != whole.shape[d]}
    if len(differing) <= 1 and any(_holds(Shard(d), whole, locals_) for d in differing or range(whole.ndim)):
        return next(Shard(d) for d in sorted(differing) or range(whole.ndim) if _holds(Shard(d), whole, locals_))
    mesh = _mesh_relation(whole, locals_)
    if mesh is not None:
        return mesh
    dims = sorted(differing) if differing else range(whole.ndim)
    for d in dims:
        if len(differing) > 1:
            break
        if _holds(Shard(d), whole, locals_):
            return Shard(d)
        per_rank = []
        for r, loc in enumerate(locals_):
            pos = _slab_positions(whole, loc, d, chunk_bounds(whole.shape[d], world, r)[0])
            if pos is None:
                break
            per_rank.append(pos)
        else:
            rel = _layout_from_positions(per_rank, whole.shape[d], d, world)
            if rel is not None and _holds(rel, whole, locals_):
                return rel
    return None


def _mesh_relation(whole: np.ndarray, locals_: list[np.ndarray]) -> Optional[Relation]:
    """A relation on a two-axis mesh (outer x inner ranks, e.g. dp x tp) that varies along
    one axis only: the ranks along the other axis hold the same piece."""
    world = len(locals_)
    for outer in range(2, world // 2 + 1):
        if world % outer:
            continue
        shape = (outer, world // outer)
        grid = np.arange(world).reshape(shape)
        for axis in (0, 1):
            lines = grid if axis == 1 else grid.T  # ranks that differ only along the other axis
            same = all(np.array_equal(locals_[r], locals_[line[0]]) for line in lines.T for r in line)
            if not same:
                continue
            along = grid[:, 0] if axis == 0 else grid[0, :]
            placement = relation_by_value(whole, [locals_[r] for r in along])
            if placement is None or isinstance(placement, (Replicate, Mesh)):
                continue
            rel = Mesh(shape, (placement, Replicate()) if axis == 0 else (Replicate(), placement))
            if _holds(rel, whole, locals_):
                return rel
    return None


def _block_starts(whole: np.ndarray, local: np.ndarray, dim: int) -> list[int]:
    """Every offset along `dim` at which `local` is a contiguous block of `whole`."""
    n, k = whole.shape[dim], local.shape[dim]
    if k == 0 or k > n:
        return list(range(n - k + 1))
    w = np.moveaxis(whole, dim, 0).reshape(n, -1)
    loc = np.moveaxis(local, dim, 0).reshape(k, -1)
    if w.shape[1] != loc.shape[1]:
        return []
    first = np.flatnonzero((w[: n - k + 1] == loc[0]).all(axis=1))
    return [int(s) for s in first if np.array_equal(w[s:s + k], loc)]


def _as_layout(dim: int, starts: list[int], locals_: list[np.ndarray], size: int) -> Relation:
    """Slices at the given block starts, written Shard(dim) when that is what they are."""
    ranges = {r: (s, s + loc.shape[dim]) for r, (s, loc) in enumerate(zip(starts, locals_))}
    world = len(locals_)
    if all(ranges[r] == chunk_bounds(size, world, r) for r in range(world)):
        return Shard(dim)
    return Slices(dim, ranges)


def may_be_pieces(whole: np.ndarray, locals_: list[np.ndarray]) -> bool:
    """A necessary condition for :func:`candidate_relations` to find any relation, cheap to
    test: every rank's first element occurs in `whole` (every relation it admits is re-checked
    with ``np.array_equal``, so each element of a piece equals one of `whole`). False: no
    layout fits, and matching may skip `whole` (issue 16: relating a step's many inputs
    against every single-device input of the same rank was quadratic in the layers)."""
    flat = np.asarray(whole).reshape(-1)
    for loc in locals_:
        loc = np.asarray(loc)
        if loc.size and not (flat == loc.reshape(-1)[0]).any():
            return False
    return True


def candidate_relations(whole: np.ndarray, locals_: list[np.ndarray]) -> tuple[list[Relation], bool]:
    """The relations under which every rank's tensor is a piece of `whole`: the one
    :func:`relation_by_value` finds first, then others the values fit as well (equal
    blocks at other offsets, other mesh axes, equal slabs in another order). Returns the
    candidates and whether the values leave the layout open (more pieces of `whole` than
    one hold what some rank holds -- constant or repeated values): ``([rel], False)``
    exactly when the layout is determined by the values."""
    rel = relation_by_value(whole, locals_)
    if rel is None:
        return [], False
    if isinstance(rel, Replicate):
        return [rel], False
    found, open_ = [rel], False

    def add(alt):
        if alt is not None and alt not in found and _holds(alt, whole, locals_):
            found.append(alt)
    differing = sorted({d for loc in locals_ for d in range(whole.ndim) if loc.shape[d] != whole.shape[d]})
    if len(differing) == 1:
        d = differing[0]
        starts = [_block_starts(whole, loc, d) for loc in locals_]
        if all(starts):
            for pick in (lambda s: s[0], lambda s: s[-1]):
                add(_as_layout(d, [pick(s) for s in starts], locals_, whole.shape[d]))
        else:  # interleaved pieces: are the slabs each rank holds unique in `whole`?
            w = np.moveaxis(whole, d, 0).reshape(whole.shape[d], -1)
            rows = [np.ascontiguousarray(row).tobytes() for row in w]
            held_rows = {np.ascontiguousarray(row).tobytes() for loc in locals_
                         for row in np.moveaxis(loc, d, 0).reshape(loc.shape[d], -1)}
            open_ = any(rows.count(h) > 1 for h in held_rows)
    world = len(locals_)
    repeats = len({np.ascontiguousarray(loc).tobytes() for loc in locals_}) < world
    for outer in range(2, world // 2 + 1) if repeats else ():  # a mesh's replicated axis repeats pieces
        if world % outer:
            continue
        grid = np.arange(world).reshape(outer, world // outer)
        for axis in (0, 1):
            along = grid[:, 0] if axis == 0 else grid[0, :]
            placement = relation_by_value(whole, [locals_[r] for r in along])
            if placement is not None and not isinstance(placement, (Replicate, Mesh)):
                add(Mesh(grid.shape, (placement, Replicate()) if axis == 0 else (Replicate(), placement)))
    distinct: dict[tuple, Relation] = {}
    for cand in found:  # the same pieces: one candidate (the first found)
        distinct.setdefault(_signature(cand, whole.shape, world), cand)
    return list(distinct.values()), open_ or len(distinct) > 1


def _signature(rel: Relation, shape: tuple, world: int) -> tuple:
    """What each rank holds under `rel` (index vectors per dim), to tell layouts apart."""
    return tuple(tuple(None if v is None else tuple(np.asarray(v).tolist()) for v in rel.layout(shape, r, world))
                 for r in range(world))


