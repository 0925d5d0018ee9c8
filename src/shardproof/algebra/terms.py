"""Hash-consed term store shared by the single-device and distributed programs."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Term:
    op: str
    attrs: tuple
    children: tuple[int, ...]
    shape: tuple[int, ...]


# term ops whose operands commute: their children are kept sorted, so a*b and b*a are one term
COMMUTATIVE: set[str] = set()

# op -> rewrite rules applied when a term with that head is built: each takes
# (store, attrs, children, shape) and returns an equal term's id, or None.
REWRITES: dict[str, list] = {}


# rewrites for a term of any head: each takes (store, op, attrs, children, shape)
ANY_REWRITES: list = []


# op -> hooks called once on each new term of that head, as it is interned: (store, tid)
ON_NEW: dict[str, list] = {}


def on_new(op: str):
    """Register a hook that sees every new term headed by `op` (algebra/scaling.py)."""
    def register(fn):
        ON_NEW.setdefault(op, []).append(fn)
        return fn
    return register


def rewrite_any(fn):
    """Register a rewrite tried on every term built (after the op's own rewrites)."""
    ANY_REWRITES.append(fn)
    return fn


def rewrite(op: str):
    """Register a rewrite for terms headed by `op` (see :mod:`shardproof.algebra.lemmas`)."""
    def register(fn):
        REWRITES.setdefault(op, []).append(fn)
        return fn
    return register


class TermStore:
    """Interns terms: structurally equal terms get the same integer id."""

    def __init__(self) -> None:
        self.terms: list[Term] = []
        self._ids: dict[tuple, int] = {}
        self._by_op: dict[str, list[int]] = {}
        self._rewritten: dict[tuple, int] = {}  # a term a rewrite turned into another: its key -> the result
        self._reshaped_from: dict[int, int] = {}  # a reshape a rewrite normalized (e.g. into a sum of views): -> its base
        # term ops this store built elementwise (operands broadcast to the result) and as reductions
        # over dims (attrs ``(dims, keepdim, over, ...)``), as the compute lemmas build them; per
        # store, so one verification never reads what another built
        self.elementwise_ops: set[str] = set()
        self.reduction_ops: set[str] = set()
        # the terms the single-device program computes as a whole tensor (set by the engine
        # once it has interpreted that program): a selection of one is related as it stands
        self.reference: frozenset[int] = frozenset()
        # linear forms that are exact multiples of one another (algebra/scaling.py): a class key
        # -> (the first form built, its factor); a later form -> (that first one, c) with form = c·first
        self.scale_reps: dict[tuple, tuple[int, Fraction]] = {}
        self.scale_class: dict[int, tuple[int, Fraction]] = {}

    def make(self, op: str, attrs: tuple, children: tuple[int, ...], shape) -> int:
        if op in COMMUTATIVE:
            children = tuple(sorted(children))
        for rule in REWRITES.get(op, ()):
            out = rule(self, attrs, tuple(children), tuple(shape))
            if out is not None:
                if children:
                    self._rewritten[(op, attrs, tuple(children))] = out
                    if op == "reshape":
                        self._reshaped_from.setdefault(out, children[0])
                return out
        for rule in ANY_REWRITES:
            out = rule(self, op, attrs, tuple(children), tuple(shape))
            if out is not None:
                return out
        key = (op, attrs, tuple(children))
        if not children:  # a leaf's value depends on its shape too (a fill of 0 as (1,) is not as (1, 1))
            key += (tuple(int(s) for s in shape),)
        tid = self._ids.get(key)
        if tid is None:
            tid = len(self.terms)
            self.terms.append(Term(op, attrs, tuple(children), tuple(int(s) for s in shape)))
            self._ids[key] = tid
            self._by_op.setdefault(op, []).append(tid)
            for hook in ON_NEW.get(op, ()):
                hook(self, tid)
        return tid

    def of_op(self, op: str) -> list[int]:
        """The ids of the terms built with `op`, oldest first (no scan of the whole store)."""
        return self._by_op.get(op, [])

    def reshaped_from(self, tid: int) -> int:
        """The term `tid` is a reshape of: its child if it is a reshape term, the base of a
        reshape that a rewrite turned into `tid` (``view(a + b)`` built as ``view(a) + view(b)``),
        else `tid` itself. Flat positions are the same in both."""
        term = self.terms[tid]
        return term.children[0] if term.op == "reshape" else self._reshaped_from.get(tid, tid)

    def lookup(self, op: str, attrs: tuple, children: tuple[int, ...]) -> int | None:
        """The term built already as `op` of `children`, or the equal term a rewrite made of it."""
        key = (op, attrs, tuple(children))
        tid = self._ids.get(key)
        return self._rewritten.get(key) if tid is None else tid

    def __getitem__(self, tid: int) -> Term:
        return self.terms[tid]

    def shape(self, tid: int) -> tuple[int, ...]:
        return self.terms[tid].shape

    def describe(self, tid: int, depth: int = 3) -> str:
        """Short human-readable rendering of a term, for messages."""
        t = self.terms[tid]
        if t.op == "input":
            return str(t.attrs[0])
        if depth == 0:
            return f"{t.op}(...)"
        kids = ", ".join(self.describe(c, depth - 1) for c in t.children)
        shown = [a for a in t.attrs if not isinstance(a, bytes)]
        extra = (", " + ", ".join(map(_fmt, shown))) if shown and t.op != "const" else ""
        return f"{t.op}({kids}{extra})"


def _fmt(a: Any) -> str:
    if isinstance(a, Fraction):
        return str(a)
    if isinstance(a, bytes):  # index sets: their size says enough in a description
        return f"<{len(a)} bytes>"
    if isinstance(a, tuple):
        return "(" + ", ".join(map(_fmt, a)) + ("," if len(a) == 1 else "") + ")"
    return repr(a)


def freeze(value: Any) -> Any:
    """Make a constant argument hashable and exact (floats become Fractions)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return Fraction(value) if np.isfinite(value) else value
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return repr(value)
