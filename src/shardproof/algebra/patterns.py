"""Term patterns: rewrite rules read as data (pattern -> replacement), in the spirit of
tinygrad's ``UPat`` and egglog rules, instead of nested if-chains.

``P("lt", V("ids"), c=Const("lo"))`` matches ``lt(t)`` whose constant operand (attribute
position 1 of the elementwise template) is bound to ``lo``; variables bind term ids and
must agree where they repeat.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import permutations
from typing import Any, Callable, Optional

from .terms import TermStore

COMMUTATIVE = {"add", "mul", "or", "and", "eq", "ne", "maximum", "minimum"}


@dataclass(frozen=True)
class V:
    """A variable: matches any term, binds its id."""
    name: str


@dataclass(frozen=True)
class Const:
    """Binds (or checks) a constant attribute."""
    name: str


@dataclass(frozen=True)
class P:
    op: str
    kids: tuple = ()
    attrs: dict = field(default_factory=dict)  # attribute position -> value | Const | predicate
    bind: Optional[str] = None

    def __init__(self, op, *kids, bind=None, **attrs):
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "kids", kids)
        object.__setattr__(self, "attrs", {int(k[1:]): v for k, v in attrs.items()})
        object.__setattr__(self, "bind", bind)


def match(terms: TermStore, t: int, pat: Any, env: dict | None = None) -> Optional[dict]:
    """Bindings if term `t` matches `pat`, else None."""
    env = {} if env is None else env
    if isinstance(pat, V):
        if pat.name in env:
            return env if env[pat.name] == t else None
        return {**env, pat.name: t}
    term = terms[t]
    if term.op != pat.op or len(term.children) != len(pat.kids):
        return None
    for pos, want in pat.attrs.items():
        if pos >= len(term.attrs):
            return None
        env = _match_attr(term.attrs[pos], want, env)
        if env is None:
            return None
    orders = permutations(range(len(pat.kids))) if term.op in COMMUTATIVE else [range(len(pat.kids))]
    for order in orders:
        e = env
        for child, k in zip(term.children, order):
            e = match(terms, child, pat.kids[k], e)
            if e is None:
                break
        else:
            return {**e, pat.bind: t} if pat.bind else e
    return None


def _match_attr(value, want, env: dict) -> Optional[dict]:
    if isinstance(want, Const):
        if want.name in env:
            return env if env[want.name] == value else None
        return {**env, want.name: value}
    if callable(want):
        return env if want(value) else None
    return env if value == want else None


def through_views(pat: P) -> list:
    """`pat`, or `pat` seen through a reshape/expand (a mask unsqueezed for broadcasting)."""
    return [pat, P("reshape", pat), P("expand", pat), P("expand", P("reshape", pat))]


def first_match(terms: TermStore, t: int, pats: list, env: dict | None = None) -> Optional[dict]:
    for p in pats:
        found = match(terms, t, p, env)
        if found is not None:
            return found
    return None


Rule = Callable[[TermStore, tuple, tuple, tuple], Optional[int]]
