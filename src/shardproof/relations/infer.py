"""Finding input relations: from the user's spec (names and globs, Python or YAML), by
value matching (live programs whose weights were sharded from the single-device ones),
and by name and shape (dumps, where no values exist); and which outputs to compare, with
what expected relation.

Value matching locates every slice of a rank's tensor inside the single-device tensor,
so it recovers Replicate, Shard, Slices and Interleaved (fused QKV, GQA) exactly; the
layout it proposes is re-checked element by element before it is used (`by_value.py`);
where the values fit several layouts, it stops and asks for the relation.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np

from .by_value import _holds, candidate_relations, relation_by_value  # noqa: F401  (relation_by_value: re-exported)
from .by_value import may_be_pieces
from .made_from import HOW as MADE_HOW, MadeFrom, by_source
from .spec import DERIVED, Ignore, Partial, Relation, RelationError, Replicate, Shard, held, parse_relation


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

class SpecEntry(NamedTuple):
    """One stated relation: the single-device tensor it refers to (None: the same name),
    the relation, and where it was stated (``file:line`` or a description), for messages."""
    seq_name: Optional[str]
    relation: Relation
    where: str = "relations"


def parse_spec(spec: Mapping | None, source: str = "relations",
               lines: Mapping[str, int] | None = None) -> dict[str, SpecEntry]:
    """``{pattern: relation | "R of seq_name" | (seq_name, relation) | {"of": seq_name, "relation": r}}``;
    ``lines`` gives the line of each pattern in the file `source`, for messages."""
    out: dict[str, SpecEntry] = {}
    if spec is None:
        return out
    if not isinstance(spec, Mapping):
        raise RelationError(f"{source}: expected a mapping from tensor names to relations, got {type(spec).__name__}")
    for pattern, value in spec.items():
        where = f"{source}:{lines[pattern]}" if lines and pattern in lines else source
        seq_name = None
        if isinstance(value, Mapping):
            unknown = set(value) - {"of", "relation"}
            if unknown or "relation" not in value:
                raise RelationError(f"{where}: entry {pattern!r} must be a relation or {{of: NAME, relation: R}}; "
                                    f"got keys {sorted(value)}")
            seq_name, value = value.get("of"), value["relation"]
        elif isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], str) \
                and not str(value[0]).startswith(("Shard", "Replicate", "Partial", "Interleaved", "Slices")):
            seq_name, value = value
        elif isinstance(value, str) and " of " in value:
            value, seq_name = (part.strip() for part in value.rsplit(" of ", 1))
        try:
            out[str(pattern)] = SpecEntry(None if seq_name is None else str(seq_name), parse_relation(value), where)
        except RelationError as exc:
            raise RelationError(f"{where}: entry {pattern!r}: {exc}") from None
    return out


@dataclass
class RelationsFile:
    """A relations file: input relations, expected output relations (keyed by the
    distributed output's name; ``of`` names the single-device output when it differs),
    and values of dump constants per side (``{"seq": {name: value}, "dist": {...}}``)."""
    inputs: dict[str, SpecEntry] = field(default_factory=dict)
    expect: dict[str, SpecEntry] = field(default_factory=dict)
    constants: dict[str, dict[str, float]] = field(default_factory=lambda: {"seq": {}, "dist": {}})
    shared: set[str] = field(default_factory=set)
    """Constants whose value the dumps do not print (HLO ``constant({...})``) stated to be
    the same in both programs (``NAME: same``)."""
    symbols: dict[str, dict[str, int]] = field(default_factory=lambda: {"seq": {}, "dist": {}})
    """Values of symbolic sizes in dump annotations (``u0`` of a data-dependent size), per side."""
    partial_outputs: list[str] = field(default_factory=list)
    """Outputs (names or globs) allowed to be partial sums completed by a reduction outside
    the graph (engine/partial_outputs.py)."""


SECTIONS = ("inputs", "expect", "constants", "symbols", "partial_outputs")


def _key_lines(node, prefix: tuple = ()) -> dict[tuple, int]:
    """Line of every mapping key in a composed YAML document, by key path."""
    import yaml
    out = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                out[prefix + (k.value,)] = k.start_mark.line + 1
                out.update(_key_lines(v, prefix + (k.value,)))
    return out


def load_yaml(path: str) -> RelationsFile:
    """Read a relations file: sections ``inputs:`` (name/glob -> relation), ``expect:``
    (output name -> relation), ``constants:`` (name -> number, or {seq: n, dist: n}, or
    ``same``: an unprinted constant holding the same value in both programs) and
    ``symbols:`` (symbolic size -> integer, or {seq: n, dist: n}) and ``partial_outputs:``
    (outputs that may be partial sums completed outside the graph);
    a file without sections is an ``inputs`` mapping."""
    import yaml
    try:
        with open(path) as f:
            text = f.read()
        data = yaml.safe_load(text)
        lines = _key_lines(yaml.compose(text))
    except OSError as exc:
        raise RelationError(f"cannot read relations file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        where = str(exc).replace('"<unicode string>"', str(path))  # PyYAML's marks: line, column, caret
        raise RelationError(f"relations file {path} is not valid YAML:\n{where}") from None
    data = data or {}
    if not isinstance(data, Mapping):
        raise RelationError(f"{path}: expected a mapping (sections {', '.join(SECTIONS)}), got {type(data).__name__}")
    if not any(k in data for k in SECTIONS):
        data, lines = {"inputs": data}, {("inputs",) + k: v for k, v in lines.items()}
    extra = [k for k in data if k not in SECTIONS]
    if extra:
        raise RelationError(f"{path}:{lines.get((extra[0],), '?')}: unknown section {extra[0]!r}; "
                            f"a relations file has sections {', '.join(SECTIONS)}")

    def section(name):
        return {k[1]: v for k, v in lines.items() if len(k) == 2 and k[0] == name}
    out = RelationsFile(parse_spec(data.get("inputs") or {}, path, section("inputs")),
                        parse_spec(data.get("expect") or {}, path, section("expect")))
    constants = data.get("constants") or {}
    if not isinstance(constants, Mapping):
        raise RelationError(f"{path}:{lines.get(('constants',), '?')}: constants must map names to numbers")
    for name, value in constants.items():
        if value == "same":
            out.shared.add(str(name))
            continue
        _per_side(out.constants, name, value, f"{path}:{lines.get(('constants', name), '?')}", "constant",
                  (int, float, list))  # a list: the elements of a table, in order
    symbols = data.get("symbols") or {}
    if not isinstance(symbols, Mapping):
        raise RelationError(f"{path}:{lines.get(('symbols',), '?')}: symbols must map size names to integers")
    for name, value in symbols.items():
        _per_side(out.symbols, name, value, f"{path}:{lines.get(('symbols', name), '?')}", "symbol", (int,))
    partial = data.get("partial_outputs") or []
    if not isinstance(partial, list) or not all(isinstance(n, str) for n in partial):
        raise RelationError(f"{path}:{lines.get(('partial_outputs',), '?')}: partial_outputs must list output names")
    out.partial_outputs = list(partial)
    return out


def _per_side(into: dict, name, value, where: str, what: str, types: tuple) -> None:
    """``NAME: v`` or ``NAME: {seq: v, dist: v}`` into ``into[side][NAME]``."""
    per_side = value if isinstance(value, Mapping) else {"seq": value, "dist": value}
    kind = "a number" if float in types else "an integer"
    if set(per_side) - {"seq", "dist"}:
        extra = " or same" if what == "constant" else ""
        raise RelationError(f"{where}: {what} {name!r} must be {kind}, {{seq: n, dist: n}}{extra}")
    for side, v in per_side.items():
        if isinstance(v, bool) or not isinstance(v, types):
            raise RelationError(f"{where}: the value of {what} {name!r} must be {kind}, not {v!r}")
        into[side][str(name)] = v


def match_spec(spec: dict[str, SpecEntry], name: str):
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

def _how_to_state(name: str, seq_name: str, candidates: Sequence[Relation]) -> str:
    rel = f"{candidates[0]}" + ("" if seq_name == name else f" of {seq_name}")
    return (f"state the relation of {name!r} in the case (relations={{{name!r}: \"{rel}\"}}) or in a "
            f"relations file (inputs:\n      {name}: {rel})")


def _by_probe(probe, name: str, seq_name: str, whole, locals_: list) -> Optional[Relation]:
    if probe is None or seq_name not in probe[0] or any(name not in r for r in probe[1]):
        return None
    rels, open_ = candidate_relations(np.asarray(probe[0][seq_name]), [np.asarray(r[name]) for r in probe[1]])
    if len(rels) == 1 and not open_ and _holds(rels[0], np.asarray(whole), locals_):
        return rels[0]
    return None


def infer_by_value(seq_values: Mapping[str, np.ndarray], rank_values: list[Mapping[str, np.ndarray]],
                   names: Sequence[str], how: str = "value", probe=None) -> dict[str, InputRelation]:
    """Relations for the distributed inputs `names`, each matched against the single-device
    input of the same name first, then against any single-device input it fits uniquely.

    Never picks silently: when the values fit several layouts (a constant tensor fits
    every block), raises :class:`RelationError` listing the candidates of each such input
    and how to state its relation. `probe` -- ``(single-device values, each rank's)`` of
    data holding distinct values, put through the same split of the data -- settles such a
    data input when it fits one layout that the real values fit as well."""
    out, ambiguous = {}, {}
    for name in names:
        locals_ = [np.asarray(v[name]) for v in rank_values]
        candidates = [name] if name in seq_values else []
        candidates += [s for s in seq_values if s != name and np.ndim(seq_values[s]) == locals_[0].ndim]
        found = []
        for seq_name in candidates:
            if not may_be_pieces(seq_values[seq_name], locals_):
                continue
            rels, open_ = candidate_relations(np.asarray(seq_values[seq_name]), locals_)
            if rels:
                found.append((seq_name, rels, open_))
                if seq_name == name:
                    break
        if not found or not (found[0][0] == name or len(found) == 1):
            continue
        seq_name, rels, open_ = found[0]
        settled = _by_probe(probe, name, seq_name, seq_values[seq_name], locals_) if open_ else None
        if settled is not None:
            out[name] = InputRelation(name, seq_name, settled, "value (data probe with distinct values)")
        elif open_:
            ambiguous[name] = (seq_name, rels)
        else:
            out[name] = InputRelation(name, seq_name, rels[0], how)
    if ambiguous:
        lines = []
        for name, (seq_name, rels) in ambiguous.items():
            of = "" if seq_name == name else f" of {seq_name}"
            alts = ", ".join(str(r) for r in rels) + ("" if len(rels) > 1 else ", or other blocks holding equal values")
            lines.append(f"{name}: its values fit several layouts{of} ({alts}); {_how_to_state(name, seq_name, rels)}")
        raise RelationError("ambiguous relation inferred by value (equal values in several places of the "
                            "single-device tensor, so the values cannot tell which piece each rank holds):\n  "
                            + "\n  ".join(lines))
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
                   spec: dict[str, SpecEntry] | None = None, seq_values=None, rank_values=None,
                   by_shape: bool = False, labels: Sequence[str] | None = None,
                   original_values=None, probe=None, made_from: MadeFrom | None = None) -> dict[str, InputRelation]:
    """Relations for every distributed input: the spec where it speaks, then values, then
    (if allowed) names and shapes. Raises RelationError naming what is missing or wrong;
    ``labels`` say where each rank's program comes from, for messages.

    ``seq_values`` of a live case hold the weights shardproof drew (distinct values) before
    the distributed programs were built; ``original_values`` the user's own. An input
    that is no piece of the drawn values but is one of the original ones was built before
    the draw (or is recomputed by the program, like a RoPE table): it is related by the
    original values, marked so, under the same ambiguity check. ``made_from``: inputs the
    capture made from another by elementwise code (optimizer states), related as their
    source is where that is proved (:mod:`~shardproof.relations.made_from`)."""
    spec = spec or {}
    names = list(rank_shapes[0])
    for r, shapes in enumerate(rank_shapes[1:], 1):
        if list(shapes) != names:
            where = [f" ({labels[q]})" if labels else "" for q in (r, 0)]
            raise RelationError(f"rank {r}{where[0]} takes inputs {', '.join(shapes)}, but rank 0{where[1]} takes "
                                f"{', '.join(names)}: every rank must take the same inputs")
    stale = unused_patterns(spec, names)
    if stale:
        raise RelationError(f"{spec[stale[0]].where}: the relations name {', '.join(map(repr, stale))}, which match "
                            f"no input of the distributed program (its inputs are: {', '.join(names)})")
    out: dict[str, InputRelation] = {}
    todo = []
    for name in names:
        entry = match_spec(spec, name)
        if entry is None:
            todo.append(name)
            continue
        seq_name, rel = entry.seq_name or name, entry.relation
        if seq_name not in seq_shapes and getattr(rel, "ids", None):  # a mask the single device does not have
            seq_name = rel.ids
        if not isinstance(rel, (Ignore, *DERIVED)) and seq_name not in seq_shapes:
            raise RelationError(f"{entry.where}: the relation for {name!r} refers to single-device input "
                                f"{seq_name!r}, which does not exist (single-device inputs: {', '.join(seq_shapes)})")
        if isinstance(rel, DERIVED):
            _check_derived(entry, name, seq_name, rel, seq_shapes, [s[name] for s in rank_shapes])
        elif seq_values is not None and rank_values is not None:
            _check_given(entry, name, seq_name, rel, seq_values, rank_values, original_values)
        out[name] = InputRelation(name, seq_name, rel, "given")
    if todo and seq_values is not None:
        made = [n for n in todo if made_from is not None and made_from(n) is not None]
        out.update(infer_by_value(seq_values, rank_values, [n for n in todo if n not in made], probe=probe))
        out.update({n: InputRelation(n, seq, rel, MADE_HOW)
                    for n, (seq, rel) in by_source(made, made_from, out, seq_values, rank_values).items()})
        out.update(infer_by_value(seq_values, rank_values, [n for n in made if n not in out], probe=probe))
        todo = [n for n in todo if n not in out]
    if todo and original_values is not None:
        out.update(infer_by_value(original_values, rank_values, todo, how="value (original weights)", probe=probe))
        todo = [n for n in todo if n not in out]
    if todo and by_shape:
        for name in list(todo):
            if name in seq_shapes:
                rel = relation_by_shape(seq_shapes[name], [s[name] for s in rank_shapes])
                if rel is not None:
                    out[name] = InputRelation(name, name, rel, "name-shape")
                    todo.remove(name)
    if todo:
        why = []
        if seq_values is not None:
            why.append("their values are not pieces of any single-device input")
        if by_shape:
            why.append("no single-device input of the same name has a shape they shard or replicate")
        hint = "" if why else " (or infer them from names and shapes: --auto-relations)"
        raise RelationError(f"no relation found for distributed input(s) {', '.join(todo)}"
                            + (f": {'; '.join(why)}" if why else "")
                            + f". State one in the relations (e.g. {todo[0]}: Shard(0)) or mark it Ignore(){hint}")
    return {n: out[n] for n in names}


def _check_given(entry: SpecEntry, name: str, seq_name: str, rel: Relation, seq_values, rank_values,
                 original_values) -> None:
    """A stated layout must hold for the values of a live case: the ranks hold exactly the
    pieces it names (of the drawn single-device values, or of the user's own for programs
    built before the draw). Relations without a layout (Partial, Ignore) and shapes the
    relation cannot give (reported later, with the shapes) are not judged here."""
    if seq_name not in seq_values or any(name not in v for v in rank_values):
        return
    locals_ = [np.asarray(v[name]) for v in rank_values]
    world = len(locals_)
    if isinstance(rel, Partial) and rel.op == "sum":
        return _check_partial(entry, name, seq_name, seq_values, locals_, original_values)
    for values in (seq_values, original_values or {}):
        whole = values.get(seq_name)
        if whole is None:
            continue
        whole = np.asarray(whole)
        try:
            vecs = [rel.layout(whole.shape, r, world) for r in range(world)]
        except (RelationError, TypeError, ValueError, IndexError):
            return
        if any(v is None for v in vecs) or any(held(whole, v).shape != loc.shape for v, loc in zip(vecs, locals_)):
            return
        if _holds(rel, whole, locals_):
            return
    rels, _ = candidate_relations(np.asarray(seq_values[seq_name]), locals_)
    fits = f"; their values fit {', '.join(map(str, rels))}" if rels else ""
    raise RelationError(f"{entry.where}: the stated relation {rel} for {name!r} does not hold: it is contradicted by "
                        f"the values (the ranks do not hold those pieces of single-device {seq_name!r}){fits}")


def _check_partial(entry: SpecEntry, name: str, seq_name: str, seq_values, locals_: list, original_values) -> None:
    """A stated ``Partial("sum")`` of a parameter or buffer (the inputs `original_values`
    holds) must hold for a live case's values: the ranks' values sum to the single-device
    one (of the drawn values, or of the user's own). Data inputs are not judged: a relation
    stated for data says what the ranks are given (the runs draw data that way)."""
    if seq_name not in (original_values or {}):
        return
    for values in (seq_values, original_values or {}):
        whole = values.get(seq_name)
        if whole is None or any(np.shape(loc) != np.shape(whole) for loc in locals_):
            return
        if np.allclose(np.sum(locals_, axis=0), whole, rtol=1e-5, atol=1e-6):
            return
    rels, _ = candidate_relations(np.asarray(seq_values[seq_name]), locals_)
    fits = f"; their values fit {', '.join(map(str, rels))}" if rels else ""
    raise RelationError(f"{entry.where}: the stated relation Partial(\"sum\") for {name!r} does not hold: it is "
                        f"contradicted by the values (the ranks' values do not sum to single-device {seq_name!r}){fits}")


def _check_derived(entry: SpecEntry, name: str, seq_name: str, rel, seq_shapes, local_shapes) -> None:
    """Ids named by a derived relation exist and have one element per element of the
    tensor: a mask may view them (a flattened copy of the ids), not broadcast them."""
    ids = getattr(rel, "ids", None) or seq_name
    if ids not in seq_shapes:
        raise RelationError(f"{entry.where}: {rel} for {name!r} names ids {ids!r}, which are not a single-device "
                            f"input (single-device inputs: {', '.join(seq_shapes)})")
    count = int(np.prod(seq_shapes[ids]))
    for shape in {tuple(s) for s in local_shapes}:
        if int(np.prod(shape)) != count:
            raise RelationError(f"{entry.where}: {rel} for {name!r} (shape {list(shape)}) needs one id per element, "
                                f"but the ids {ids!r} have shape {list(seq_shapes[ids])}")


# ---------------------------------------------------------------- outputs

def resolve_outputs(seq_outputs: Sequence[str], rank_outputs: list[Sequence[str]],
                    expect: dict[str, SpecEntry] | None = None) -> dict[str, tuple[str, Optional[Relation]]]:
    """Which distributed output each checked single-device output is compared with, and
    the relation expected (None: any relation that recovers it), by output tensor names
    in return order (a name may repeat).

    With expectations, exactly the outputs they name are checked: a key names the
    distributed output, ``of`` the single-device one (default: the same name). Without,
    every single-device output is checked, against the distributed output of the same
    name if every rank returns one, else -- when both programs return as many outputs --
    the one at its position (dumps that also return saved activations differ in length,
    and their positions mean nothing)."""
    common = [n for n in dict.fromkeys(rank_outputs[0]) if all(n in r for r in rank_outputs[1:])]
    listing = f"the distributed program's outputs are: {', '.join(common) or 'none'}"
    if expect:
        out: dict[str, tuple[str, Optional[Relation]]] = {}
        for dist_name, entry in expect.items():
            seq_name = entry.seq_name or dist_name
            if dist_name not in common:
                raise RelationError(f"{entry.where}: the expectation names output {dist_name!r}, which not every rank "
                                    f"returns ({listing})")
            if seq_name not in seq_outputs:
                raise RelationError(f"{entry.where}: the expectation for {dist_name!r} refers to single-device output "
                                    f"{seq_name!r}, which it does not return (its outputs are: "
                                    f"{', '.join(dict.fromkeys(seq_outputs))})")
            if seq_name in out:
                raise RelationError(f"{entry.where}: single-device output {seq_name!r} is expected twice")
            out[seq_name] = (dist_name, entry.relation)
        return out
    claimed = {n for n in seq_outputs if n in common}
    out, unmatched = {}, []
    for i, name in enumerate(seq_outputs):
        if name in out:
            continue
        if name in common:
            out[name] = (name, None)
            continue
        other = rank_outputs[0][i] if len(rank_outputs[0]) == len(seq_outputs) else None
        if other is None or other in claimed or other not in common:
            unmatched.append(name)
            continue
        claimed.add(other)
        out[name] = (other, None)
    if unmatched:
        raise RelationError(f"single-device output(s) {', '.join(unmatched)} have no distributed counterpart by name "
                            f"or position ({listing}); say which outputs to compare in the relations' expect: "
                            f"section (DIST_NAME: {{of: SEQ_NAME, relation: R}})")
    return out
