"""Input-independent subgraphs, related by value.

Anything a program computes only from constants, aranges, rank ids and sizes (RoPE
position tables, causal masks built from rank offsets, index arithmetic) has one concrete
value per rank. Each such tensor of the single-device program is evaluated once; a
distributed tensor of that kind whose term the single-device program never builds (the
rank wrote ``rank * s + arange(s)`` where the single device wrote ``arange(S)``) is
evaluated too and, when its value is exactly a block of a single-device table (a window
of positions along each dim), it *is* that block: the rules go on from the single-device
term at those positions, as they do from an input.

Exactness: the relation is claimed only when the two arrays are equal element for
element (``np.array_equal``, NaN where NaN) as the reference numerics compute them, for
tensors of the same kind (boolean or numeric); a value that equals no block keeps the
term its rules built. Tensors holding one value everywhere (fills) keep their terms
(they already match by shape), and so do random and uninitialized ones (never
input-independent). Pure functions over nodes and arrays; no I/O."""
from __future__ import annotations

from itertools import product

import numpy as np

from ..algebra.layout import Val, canon_vec
from ..algebra.terms import TermStore
from ..ir.graph import Node
from ..ops.registry import lookup, run_numerics
from .lockstep import resolve

MAX_TABLE = 1 << 20  # elements: larger constants are not evaluated here
MAX_WINDOWS = 4096  # offset combinations tried per pair of tables
MAX_COMPARED = 1 << 24  # elements compared per pair of tables
VARYING = ("rand", "bernoulli", "dropout", "normal", "uniform", "empty", "multinomial", "exponential", "poisson",
           "cauchy", "geometric", "native_batch_norm")


def _is_bool(node: Node) -> bool:
    return str(getattr(node.type, "dtype", "")) == "b8"


def block_of(whole: np.ndarray, part: np.ndarray) -> tuple | None:
    """Index vectors (None: the whole dim) with ``whole[np.ix_(*vecs)] == part`` exactly,
    each a window of consecutive positions; the first such (lowest offsets), else None."""
    if whole.ndim != part.ndim or any(p > w for p, w in zip(part.shape, whole.shape)) or not part.size:
        return None
    ranges = [range(w - p + 1) for w, p in zip(whole.shape, part.shape)]
    windows = np.prod([len(r) for r in ranges], dtype=np.float64)
    if windows > MAX_WINDOWS or windows * part.size > MAX_COMPARED:
        return None
    for offsets in product(*ranges):
        window = whole[tuple(slice(o, o + p) for o, p in zip(offsets, part.shape))]
        if np.array_equal(window, part, equal_nan=window.dtype.kind == "f"):
            return tuple(canon_vec(np.arange(o, o + p), w) for o, p, w in zip(offsets, part.shape, whole.shape))
    return None


class Tables:
    """Values of the input-independent tensors of both programs; the single-device ones
    are the tables distributed ones are matched against."""

    def __init__(self, terms: TermStore) -> None:
        self.terms = terms
        self.values: dict[tuple, np.ndarray] = {}  # (program, node name) -> value
        self.seq: list[tuple[Val, np.ndarray, bool]] = []
        self.seq_terms: set[int] = set()

    def value(self, who, node: Node, env_values: dict):
        """The node's value if it is input-independent (every tensor it reads is), else None."""
        if node.op == "input" or any(v in node.op for v in VARYING):
            return None
        if node.op == "constant":
            value = node.kwargs.get("value")
            return None if value is None else np.asarray(value)
        opdef = lookup(node.op)
        if opdef is None or opdef.collective or isinstance(node.type, tuple) or node.type is None:
            return None
        if node.type.numel > MAX_TABLE:
            return None
        for x in node.inputs:
            if (who, x.name) not in self.values:
                return None
        env = {x: self.values[(who, x.name)] for x in node.inputs}
        try:
            with np.errstate(all="ignore"):
                out = run_numerics(opdef, node, resolve(node.args, env),
                                   {k: resolve(v, env) for k, v in node.kwargs.items()})
        except Exception:  # noqa: BLE001 -- no numeric value: the node keeps its rules' term only
            return None
        out = np.asarray(out)
        return out if out.shape == tuple(node.type.shape) else None

    def settle(self, who, node: Node, out):
        """Record the node's value; a distributed table equal to a block of a single-device
        one becomes that block. Returns the (possibly replaced) value of the node."""
        value = self.value(who, node, self.values)
        if value is None:
            return out
        self.values[(who, node.name)] = value
        if not isinstance(out, Val) or value.ndim == 0 or value.size < 2 or _uniform(value):
            if who is None and isinstance(out, Val):
                self.seq_terms.add(out.t)
            return out
        if who is None:
            self.seq.append((out, value, _is_bool(node)))
            self.seq_terms.add(out.t)
            return out
        if out.t in self.seq_terms:
            return out
        for sval, whole, is_bool in self.seq:
            if is_bool != _is_bool(node) or any(v is not None for v in sval.vecs):
                continue
            vecs = block_of(whole, value)
            if vecs is not None:
                return Val(sval.t, vecs)
        return out


def _uniform(value: np.ndarray) -> bool:
    flat = value.reshape(-1)
    return bool(np.all(flat == flat[0])) if flat.size else True
