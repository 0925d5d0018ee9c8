"""Finding input relations: from the user's spec (names and globs, Python or YAML), by
value matching (live programs whose weights were sharded from the single-device ones),
and by name and shape (dumps, where no values exist).

Value matching locates every slice of a rank's tensor inside the single-device tensor,
so it recovers Replicate, Shard, Slices and Interleaved (fused QKV, GQA) exactly; the
layout it proposes is re-checked element by element before it is used.
"""
from __future__ import annotations

import fnmatch
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from .spec import (Ignore, Interleaved, Relation, RelationError, Replicate, Shard, Slices, chunk_bounds, held,
                   parse_relation)


@dataclass(frozen=True)
class InputRelation:
    """Distributed input ``name`` relates to single-device input ``seq_name`` by ``relation``."""
    name: str
    seq_name: str
    relation: Relation
    how: str = "given"  # given | value | name-shape

    def __str__(self):
        of = "" if self.seq_name == self.name else f" of {self.seq_name}"
        return f"{self.name}: {self.relation}{of} ({self.how})"


# ---------------------------------------------------------------- user specs

def parse_spec(spec: Mapping | None, source: str = "relations") -> dict[str, tuple[Optional[str], Relation]]:
    """``{pattern: relation | (seq_name, relation) | {"of": seq_name, "relation": r}}``."""
    out: dict[str, tuple[Optional[str], Relation]] = {}
    if spec is None:
        return out
    if not isinstance(spec, Mapping):
        raise RelationError(f"{source}: expected a mapping from input names to relations, got {type(spec).__name__}")
    for pattern, value in spec.items():
        seq_name = None
        if isinstance(value, Mapping):
            unknown = set(value) - {"of", "relation"}
            if unknown or "relation" not in value:
                raise RelationError(f"{source}: entry {pattern!r} must be a relation or {{of: NAME, relation: R}}; "
                                    f"got keys {sorted(value)}")
            seq_name, value = value.get("of"), value["relation"]
        elif isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], str) \
                and not str(value[0]).startswith(("Shard", "Replicate", "Partial", "Interleaved", "Slices")):
            seq_name, value = value
        try:
            out[str(pattern)] = (seq_name, parse_relation(value))
        except RelationError as exc:
            raise RelationError(f"{source}: entry {pattern!r}: {exc}") from None
    return out


def load_yaml(path: str) -> dict[str, tuple[Optional[str], Relation]]:
    """Read a relations file: ``inputs:`` (or a top-level mapping) of name/glob -> relation."""
    import yaml
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise RelationError(f"cannot read relations file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise RelationError(f"relations file {path} is not valid YAML: {exc}") from None
    if isinstance(data, Mapping) and "inputs" in data:
        data = data["inputs"]
    return parse_spec(data or {}, source=path)


def match_spec(spec: dict[str, tuple[Optional[str], Relation]], name: str):
    """The spec entry for an input: exact name first, then the first matching glob."""
    if name in spec:
        return spec[name]
    for pattern, entry in spec.items():
        if fnmatch.fnmatchcase(name, pattern):
            return entry
    return None


def unused_patterns(spec: dict, names: Sequence[str]) -> list[str]:
    return [p for p in spec if p not in names and not any(fnmatch.fnmatchcase(n, p) for n in names)]


# ---------------------------------------------------------------- value matching

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


def infer_by_value(seq_values: Mapping[str, np.ndarray], rank_values: list[Mapping[str, np.ndarray]],
                   names: Sequence[str]) -> dict[str, InputRelation]:
    """Relations for the distributed inputs `names`, each matched against the single-device
    input of the same name first, then against any single-device input it fits uniquely."""
    out = {}
    for name in names:
        locals_ = [np.asarray(v[name]) for v in rank_values]
        candidates = [name] if name in seq_values else []
        candidates += [s for s in seq_values if s != name and np.ndim(seq_values[s]) == locals_[0].ndim]
        found = []
        for seq_name in candidates:
            rel = relation_by_value(np.asarray(seq_values[seq_name]), locals_)
            if rel is not None:
                found.append(InputRelation(name, seq_name, rel, "value"))
                if seq_name == name:
                    break
        if found and (found[0].seq_name == name or len(found) == 1):
            out[name] = found[0]
    return out


# ---------------------------------------------------------------- names and shapes

def relation_by_shape(seq_shape: Sequence[int], local_shapes: list[Sequence[int]]) -> Optional[Relation]:
    """The simplest relation consistent with the shapes alone (Replicate or Shard)."""
    world = len(local_shapes)
    if all(tuple(s) == tuple(seq_shape) for s in local_shapes):
        return Replicate()
    if len(seq_shape) != len(local_shapes[0]):
        return None
    dims = {d for s in local_shapes for d in range(len(seq_shape)) if s[d] != seq_shape[d]}
    if len(dims) == 1:
        d = dims.pop()
        if all(tuple(s) == Shard(d).local_shape(seq_shape, r, world) for r, s in enumerate(local_shapes)):
            return Shard(d)
    return None


def resolve_inputs(seq_shapes: Mapping[str, tuple], rank_shapes: list[Mapping[str, tuple]],
                   spec: dict | None = None, seq_values=None, rank_values=None,
                   by_shape: bool = False) -> dict[str, InputRelation]:
    """Relations for every distributed input: the spec where it speaks, then values, then
    (if allowed) names and shapes. Raises RelationError naming what is missing or wrong."""
    spec = spec or {}
    names = list(rank_shapes[0])
    for r, shapes in enumerate(rank_shapes[1:], 1):
        if list(shapes) != names:
            raise RelationError(f"rank {r}'s program has inputs {list(shapes)}, rank 0's has {names}: "
                                f"every rank must take the same inputs")
    stale = unused_patterns(spec, names)
    if stale:
        raise RelationError(f"the relations name {', '.join(map(repr, stale))}, which match no input of the "
                            f"distributed program (its inputs are: {', '.join(names)})")
    out: dict[str, InputRelation] = {}
    todo = []
    for name in names:
        entry = match_spec(spec, name)
        if entry is None:
            todo.append(name)
            continue
        seq_name, rel = entry
        seq_name = seq_name or name
        if not isinstance(rel, Ignore) and seq_name not in seq_shapes:
            raise RelationError(f"the relation for {name!r} refers to single-device input {seq_name!r}, which does "
                                f"not exist (single-device inputs: {', '.join(seq_shapes)})")
        out[name] = InputRelation(name, seq_name, rel, "given")
    if todo and seq_values is not None:
        out.update(infer_by_value(seq_values, rank_values, todo))
        todo = [n for n in todo if n not in out]
    if todo and by_shape:
        for name in list(todo):
            if name in seq_shapes:
                rel = relation_by_shape(seq_shapes[name], [s[name] for s in rank_shapes])
                if rel is not None:
                    out[name] = InputRelation(name, name, rel, "name-shape")
                    todo.remove(name)
    if todo:
        raise RelationError(f"no relation found for distributed input(s) {', '.join(todo)}: their values are not "
                            f"pieces of any single-device input. State one in the case's relations "
                            f"(e.g. {{{todo[0]!r}: 'Shard(0)'}}) or mark it Ignore()")
    return {n: out[n] for n in names}
