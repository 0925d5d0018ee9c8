"""Boolean masks and integer range tests: normal forms, and vLLM's form of the
vocab-parallel lookup.

Normal forms (each an identity over exact arithmetic and booleans):

- ``(x >= a) & (x < b)`` with ``a >= b`` is all-false (an empty range);
- ``m & false`` is false, ``m & true`` is ``m``; ``m | false`` is ``m``, ``m | true`` is true;
- ``0 * x`` is zero (x real), a multiple of a constant is a constant, and constant-zero
  parts of a linear form drop out.

vLLM's ``VocabParallelEmbedding`` masks token ids as
``inside = (ids >= lo) & (ids < hi)``, ``ids' = inside * (ids - lo * inside)`` (plus an
"added vocabulary" range, empty unless LoRA adds tokens: the normal forms above remove
it), looks up ``W[lo:hi]`` and zeroes the rows where ``~inside``. With the lemmas in
:mod:`.lemmas` this is ``lookup_in`` then ``range_lookup``, and ranks whose ranges tile
the table sum to the plain lookup.

torchtitan's ``Embedding`` (``models/common/embedding.py``) clamps instead of masking the ids:
``embedding(W[lo:hi], clamp(ids - lo, a, b)) * inside`` with ``inside`` cast to the lookup's
dtype and unsqueezed over the embedding dim. The clamp is the identity on ``[0, hi - lo)``
when ``a <= 0`` and ``b >= hi - lo - 1``, so the lookup is ``lookup_in`` (whatever row it
gives elsewhere), and the product with the mask is zero outside the range: ``range_lookup``
(table values are finite, the engine's real-number convention that makes ``0 * x`` zero).

Constants built here carry their shape in the attributes (``fill(value, shape)``), so
they never share an id with a constant of another shape.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .lemmas import BLOCK, OUTSIDE, linear, linear_parts
from .patterns import Const, P, V, first_match, match, through_views
from .terms import TermStore, rewrite

INSIDE = P("and", P("ge", V("ids"), _1=Const("lo")), P("lt", V("ids"), _1=Const("hi")))
# ~inside, as built (a not of the range test) or in negation normal form (ids < lo) | (ids >= hi)
NOT_INSIDE = [p for op in ("bitwise_not", "logical_not") for p in through_views(P(op, INSIDE))] + through_views(OUTSIDE)


def _number(v) -> bool:
    return isinstance(v, (int, Fraction, float)) and not isinstance(v, bool)


def fill_of(terms: TermStore, t: int):
    """The constant a fill term holds (through reshapes), else None."""
    term = terms[t]
    while term.op == "reshape":
        term = terms[term.children[0]]
    return term.attrs[0] if term.op == "fill" else None


def make_fill(terms: TermStore, value, shape) -> int:
    return terms.make("fill", (value, tuple(shape)), (), shape)


# ---------------------------------------------------------------- booleans

def _with_constant(terms, attrs, children, shape, absorbing: bool):
    """x op c for a constant mask c: the absorbing element wins, the identity drops."""
    if len(children) != 2 or attrs[:2] != ("$", "$"):
        return None
    a, b = children
    for x, y in ((a, b), (b, a)):
        v = fill_of(terms, x)
        if v is absorbing:
            return make_fill(terms, absorbing, shape)
        if v is (not absorbing) and terms.shape(y) == tuple(shape):
            return y
    return None


@rewrite("and")
def _and_identities(terms, attrs, children, shape):
    done = _with_constant(terms, attrs, children, shape, absorbing=False)
    if done is not None or len(children) != 2 or attrs[:2] != ("$", "$"):
        return done
    ta, tb = terms[children[0]], terms[children[1]]
    for lo_t, hi_t in ((ta, tb), (tb, ta)):
        if (lo_t.op == "ge" and hi_t.op == "lt" and lo_t.children == hi_t.children and len(lo_t.children) == 1
                and lo_t.attrs[0] == "$" and hi_t.attrs[0] == "$"
                and _number(lo_t.attrs[1]) and _number(hi_t.attrs[1]) and lo_t.attrs[1] >= hi_t.attrs[1]):
            return make_fill(terms, False, shape)  # lo <= x < hi with hi <= lo: never
    return None


@rewrite("or")
def _or_identities(terms, attrs, children, shape):
    return _with_constant(terms, attrs, children, shape, absorbing=True)


# ---------------------------------------------------------------- negation normal form

COMPLEMENT = {"lt": "ge", "ge": "lt", "gt": "le", "le": "gt", "eq": "ne", "ne": "eq"}
DUAL = {"and": "or", "or": "and"}
NEGATION_VIEWS = ("reshape", "permute", "expand", "gather")


def negated(terms: TermStore, t: int) -> int:
    """``not t`` in negation normal form: De Morgan over and/or, a comparison replaced by
    its complement (``not (x < c)`` is ``x >= c``), a double negation removed, and the
    negation moved under views; else ``logical_not(t)``. Exact for booleans and for
    comparisons of values that are never NaN: the caller checks the comparisons' operands
    are integers or booleans."""
    term = terms[t]
    if term.op in COMPLEMENT and term.attrs[:2].count("$") >= 1:
        return terms.make(COMPLEMENT[term.op], term.attrs, term.children, term.shape)
    if term.op in DUAL and len(term.children) == 2 and term.attrs[:2] == ("$", "$"):
        kids = tuple(negated(terms, c) for c in term.children)
        return terms.make(DUAL[term.op], term.attrs, tuple(sorted(kids)), term.shape)
    if term.op == "logical_not" and terms[term.children[0]].op in (*COMPLEMENT, *DUAL, "logical_not"):
        return term.children[0]  # the operand is itself a boolean
    if term.op == "fill" and isinstance(term.attrs[0], (bool, np.bool_)):
        return terms.make("fill", (not term.attrs[0],) + term.attrs[1:], (), term.shape)
    if term.op in NEGATION_VIEWS and len(term.children) == 1:
        return terms.make(term.op, term.attrs, (negated(terms, term.children[0]),), term.shape)
    return terms.make("logical_not", ("$", ()), (t,), term.shape)


# ---------------------------------------------------------------- constants in linear forms

@rewrite("scale")
def _scale_by_zero(terms, attrs, children, shape):
    """0 * x is zero (reached when the linear normal form cancels everything)."""
    return make_fill(terms, 0, shape) if attrs[0] == 0 else None


@rewrite("add_const")
def _shifted_constant(terms, attrs, children, shape):
    """A constant plus c is a constant (``1 - mask`` of an all-false mask is all ones)."""
    v = _as_number(fill_of(terms, children[0]))
    if not _number(v) or not _number(attrs[0]) or terms.shape(children[0]) != tuple(shape):
        return None
    return make_fill(terms, v + attrs[0], shape)


@rewrite("mul")
def _times_constant(terms, attrs, children, shape):
    """x times a constant tensor broadcast over it is an exact scaling of x."""
    if len(children) != 2:
        return None
    from .compute import scale
    for x, c in (children, children[::-1]):
        v = _as_number(fill_of(terms, c))
        if _number(v) and np.isfinite(float(v)) and terms.shape(x) == tuple(shape):
            return scale(terms, x, v)
    return None


@rewrite("lin")
def _constant_parts(terms, attrs, children, shape):
    """Parts that are constants of the full shape fold into one constant; a zero one drops."""
    parts = dict(zip(children, attrs))
    consts = {t: c for t, c in parts.items() if terms.shape(t) == tuple(shape) and _number(_as_number(fill_of(terms, t)))}
    if not consts or (len(consts) == 1 and _as_number(fill_of(terms, next(iter(consts)))) != 0
                      and next(iter(consts.values())) == 1):
        return None
    total = sum(Fraction(_as_number(fill_of(terms, t))) * c for t, c in consts.items())
    rest = {t: c for t, c in parts.items() if t not in consts}
    if total != 0:
        rest[make_fill(terms, total, shape)] = Fraction(1)
    if not rest:
        return make_fill(terms, 0, shape)
    return linear(terms, rest, shape)


def _as_number(v):
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v


# ---------------------------------------------------------------- vLLM vocab-parallel lookup

def _masked_ids(terms: TermStore, t: int):
    """``inside * (ids - lo * inside)`` (``inside * ids`` when lo is 0) with
    ``inside = (ids >= lo) & (ids < hi)``: the bindings {ids, lo, hi}, else None."""
    term = terms[t]
    if term.op != "mul" or len(term.children) != 2:
        return None
    for mask, value in (term.children, term.children[::-1]):
        env = match(terms, mask, INSIDE)
        if env is None or not _number(env["lo"]) or not _number(env["hi"]):
            continue
        if env["lo"] == 0 and value == env["ids"]:
            return env
        if linear_parts(terms, value) == {env["ids"]: Fraction(1), mask: -Fraction(env["lo"])}:
            return env
    return None


@rewrite("embedding")
def _vllm_lookup_in_range(terms, attrs, children, shape):
    """``embedding(W[lo:hi], inside * (ids - lo*inside))`` equals ``embedding(W, ids)``
    wherever lo <= ids < hi (and row lo elsewhere, as the masked form of :mod:`.lemmas`)."""
    table, ids = children
    env = match(terms, table, BLOCK["embedding"])
    found = env and _masked_ids(terms, ids)
    if not found or not isinstance(found["lo"], int) or not isinstance(found["hi"], int):
        return None
    if not np.array_equal(np.frombuffer(env["rows"], dtype=np.int64), np.arange(found["lo"], found["hi"])):
        return None
    return terms.make("lookup_in", ("embedding", attrs, found["lo"], found["hi"]), (env["W"], found["ids"]), shape)


@rewrite("where")
def _zero_outside_inside(terms, attrs, children, shape):
    """where(~((ids >= lo) & (ids < hi)), 0, lookup_in(W, ids, lo, hi)) is range_lookup."""
    if len(children) != 2 or attrs[1] != 0:
        return None
    mask, value = children
    inner = terms[value]
    if inner.op != "lookup_in":
        return None
    _, _, lo, hi = inner.attrs
    if first_match(terms, mask, NOT_INSIDE, {"ids": inner.children[1], "lo": lo, "hi": hi}) is None:
        return None
    return terms.make("range_lookup", inner.attrs, inner.children, shape)


# ---------------------------------------------------------------- torchtitan's clamped lookup

CLAMPED = P("clamp", P("sub", V("ids"), _1=Const("lo")), _1=Const("a"), _2=Const("b"))
CLAMPED_AT_ZERO = P("clamp", V("ids"), _1=Const("a"), _2=Const("b"))  # a block starting at 0, no shift


def _keeps_block(env, rows: int) -> bool:
    """clamp(x, a, b) == x for every x in [0, rows): a <= 0 and b >= rows - 1 (None: unbounded)."""
    a, b = env["a"], env["b"]
    return (a is None or (_number(a) and a <= 0)) and (b is None or (_number(b) and b >= rows - 1))


@rewrite("embedding")
def _clamped_lookup_in_range(terms, attrs, children, shape):
    """``embedding(W[lo:hi], clamp(ids - lo, a, b))`` equals ``embedding(W, ids)`` wherever
    lo <= ids < hi, when the clamp keeps [0, hi - lo): ``lookup_in(W, ids, lo, hi)``."""
    table, ids = children
    env = match(terms, table, BLOCK["embedding"]) or {"W": table, "rows": None}
    found = match(terms, ids, CLAMPED, env) or match(terms, ids, CLAMPED_AT_ZERO, {**env, "lo": 0})
    if not found or not isinstance(found["lo"], int) or isinstance(found["lo"], bool):
        return None
    size = terms.shape(found["W"])[0]
    rows = np.arange(size) if found["rows"] is None else np.frombuffer(found["rows"], dtype=np.int64)
    hi = found["lo"] + len(rows)
    if not np.array_equal(rows, np.arange(found["lo"], hi)) or not _keeps_block(found, len(rows)):
        return None
    return terms.make("lookup_in", ("embedding", attrs, found["lo"], hi), (found["W"], found["ids"]), shape)


def _mask_over_rows(terms, mask: int, ids: int, lo: int, hi: int, shape) -> bool:
    """`mask` is ``(ids >= lo) & (ids < hi)`` unsqueezed to ids' shape + (1,) (maybe then
    expanded to `shape`), so that it broadcasts over the lookup's last dim only."""
    if terms[mask].op == "expand" and terms.shape(mask) == tuple(shape):
        mask = terms[mask].children[0]
    ids_shape = terms.shape(ids)
    term = terms[mask]
    if term.op != "reshape" or terms.shape(mask) != ids_shape + (1,) or tuple(shape[:-1]) != ids_shape:
        return False
    return match(terms, term.children[0], INSIDE, {"ids": ids, "lo": lo, "hi": hi}) is not None


@rewrite("mul")
def _masked_product(terms, attrs, children, shape):
    """``lookup_in(W, ids, lo, hi) * ((ids >= lo) & (ids < hi))`` (the mask over the rows) is
    zero outside the range: ``range_lookup``."""
    if len(children) != 2:
        return None
    for value, mask in (children, children[::-1]):
        inner = terms[value]
        if inner.op != "lookup_in" or inner.attrs[0] != "embedding" or terms.shape(value) != tuple(shape):
            continue
        _, _, lo, hi = inner.attrs
        if _mask_over_rows(terms, mask, inner.children[1], lo, hi, shape):
            return terms.make("range_lookup", inner.attrs, inner.children, shape)
    return None
