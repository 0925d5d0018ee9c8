"""The online-softmax / log-sum-exp merge (ring attention, flash attention) as a normal form.

Notation: ``S`` is a score term ``[..., Q, N]`` (maybe a causal ``masked_fill`` of finite
scores with -inf), ``c`` a per-row shift ``[..., Q, 1]``, ``K`` a set of key positions.
``W(S, c) = exp(S - c)`` (the program's ``exp(lin(S, c; 1, -1))``) and

- ``L(S, c, K) = sum_{k in K} W(S, c)[..., k]``              (the running sum ``l``; a ``sum`` term over K)
- ``A(S, c, V, K) = sum_{k in K} W(S, c)[..., k] V[k]``     (the accumulator; a ``dot`` term over pairs (k, k))
- ``LSE(S, K) = log sum_{k in K} exp(S[..., k])``           (``logsumexp`` of the K columns)

The terms keep their own meaning (they are what the program computes); the lemma rewrites
one of them into another only where both are equal, in exact real arithmetic extended
with -inf (a masked score), on the rows the value holds:

1. rescale: ``L(S, c, K) * exp(c - c') = L(S, c', K)`` and the same for ``A``, on rows where
   ``c`` and ``c'`` are finite (``exp(s - c) exp(c - c') = exp(s - c')``; a masked ``s`` gives 0
   on both sides). Where ``c = -inf`` the program computes ``exp(-inf + inf) = nan``: no rewrite.
2. merge: ``L(S, c, K1) + L(S, c, K2) = L(S, c, K1 u K2)`` for disjoint K1, K2 (and ``A``): a sum
   over a disjoint union; overlapping sets (a block merged twice) are not merged.
3. logaddexp: ``logaddexp(LSE(S, K1), LSE(S, K2)) = LSE(S, K1 u K2)`` for disjoint sets.
4. normalize: ``A(S, c, V, K) / L(S, c, K) = softmax(S) @ V`` and
   ``A(S, LSE(S, K), V, K) = softmax(S) @ V`` on rows where ``c`` is finite, some key of K is
   not masked, and every key outside K is masked (exp(-inf - c) = 0 adds nothing): the
   shift cancels (max-shift invariance of softmax).

Rows matter (a causal block's max is -inf on the rows that see none of its keys), so these
rewrites are applied to a *value* (term and layout) after its op's rule, never inside the
term store: a term is only claimed equal on the positions the value holds. Finiteness is
decided on the terms: a max or log-sum-exp of the unmasked columns of finite scores (inputs
through linear ops and contractions) is finite on a row iff some column is unmasked there;
masks must be constant (built from aranges). Anything else: no rewrite (the engine then
answers unknown or finds the difference). Soundness tests: tests/harness/test_online_softmax.py.
"""
from __future__ import annotations

import numpy as np

from .compute import rowwise
from .layout import Val, full, view_term
from .lemmas import linear
from .softmax_rows import held_rows, key_set, row_facts
from .terms import TermStore


# ---------------------------------------------------------------- constants and finiteness


def finite_rows(terms: TermStore, c: int):
    """Boolean array over c's rows (its shape without the last, size-1 dim): where the shift
    ``c`` is finite; None when not known."""
    found = _finite_rows(terms, c)
    return None if found is None else found[0]


def _finite_rows(terms: TermStore, c: int):
    """(where `c` is finite, whether c is -inf wherever it is not finite) or None. A max or
    log-sum-exp of scores is finite or -inf; so are their maxes and logaddexps, finite where
    one operand is; a linear form is finite where all its parts are (elsewhere it may be nan)."""
    term = terms[c]
    nd = len(term.shape)
    if term.op == "amax" and len(term.attrs) == 3 and term.attrs[:2] == ((nd - 1,), True):
        s = term.children[0]
        keys = None if term.attrs[2] is None else np.frombuffer(term.attrs[2][0], dtype=np.int64)
        facts = row_facts(terms, s, keys)
        return None if facts is None else (facts[0], True)
    lse = lse_form(terms, c)
    if lse is not None:
        facts = row_facts(terms, *lse)
        return None if facts is None else (facts[0], True)
    if term.op in ("maximum", "logaddexp", "lin") and term.children \
            and all(terms.shape(k) == term.shape for k in term.children):
        parts = [_finite_rows(terms, k) for k in term.children]
        if any(p is None for p in parts):
            return None
        if term.op == "lin":
            return np.logical_and.reduce([p[0] for p in parts]), False
        if not all(p[1] for p in parts):  # an operand that may be nan: the max may be nan
            return None
        return np.logical_or.reduce([p[0] for p in parts]), True
    return None


# ---------------------------------------------------------------- recognizers


def _split(terms: TermStore, d: int, shape: tuple):
    """``S - c`` (a linear form over S's shape) -> (S, c), c one column; else None."""
    lin = terms[d]
    if lin.op != "lin" or len(lin.children) < 2 or len(shape) < 2 or shape[-1] < 2:
        return None
    col = tuple(shape[:-1]) + (1,)
    score = {k: a for k, a in zip(lin.children, lin.attrs) if terms.shape(k) == tuple(shape)}
    shift = {k: -a for k, a in zip(lin.children, lin.attrs) if terms.shape(k) == col}
    if not score or not shift or len(score) + len(shift) != len(lin.children):
        return None
    s, c = linear(terms, score, shape), linear(terms, shift, col)
    return None if s is None or c is None else (s, c)


def shifted(terms: TermStore, w: int):
    """``exp(S - c)`` -> (S, c), with c one shift per row of S; else None. The difference is
    a linear form: its parts of S's shape make S, its parts of one column make -c."""
    term = terms[w]
    if term.op != "exp" or len(term.children) != 1:
        return None
    return _split(terms, term.children[0], term.shape)


def _over_keys(over, n: int):
    if over is None:
        return None
    keys = np.frombuffer(over[0], dtype=np.int64)
    return None if len(keys) == n and np.array_equal(keys, np.arange(n)) else keys


def sum_form(terms: TermStore, t: int):
    """``L(S, c, K)``: {"kind", "W", "S", "c", "keys"} or None."""
    term = terms[t]
    if term.op != "sum" or len(term.attrs) != 3 or len(term.children) != 1:
        return None
    w = term.children[0]
    nd = len(terms.shape(w))
    found = shifted(terms, w)
    if found is None or term.attrs[:2] != ((nd - 1,), True):
        return None
    keys = _over_keys(term.attrs[2], terms.shape(w)[-1])
    if keys is not None and len(np.unique(keys)) != len(keys):
        return None
    return {"kind": "L", "t": t, "W": w, "S": found[0], "c": found[1], "keys": keys}


def _trailing_view(terms: TermStore, t: int, tail: tuple):
    """`t` or a reshape of it that keeps the last dims `tail` (so only merges or splits the
    leading dims): the base term, or None."""
    term = terms[t]
    if term.op == "reshape":
        base = terms.shape(term.children[0])
        if base[-len(tail):] == tail and term.shape[-len(tail):] == tail \
                and int(np.prod(base)) == int(np.prod(term.shape)):
            return term.children[0]
        return None
    return t


def unviewed(terms: TermStore, w: int) -> int:
    """``exp(view(S) - view(c))`` -> ``exp(S - c)`` where viewing that gives `w` back (a row
    view pushed inside the ``exp``, algebra/picks.py: a batched product's operand merges the
    leading dims of the weights): the weights in their shift's own rows; else `w`."""
    found = shifted(terms, w)
    if found is None:
        return w
    s, c = found
    base = c
    while terms[base].op == "lin" and len(terms[base].children) == 1:
        base = terms[base].children[0]
    if terms[base].op != "reshape":
        return w
    rows = tuple(terms.shape(terms[base].children[0]))
    shape = rows[:-1] + (terms.shape(s)[-1],)
    if not rows or rows[-1] != 1 or int(np.prod(shape)) != int(np.prod(terms.shape(s))):
        return w
    s0 = view_term(terms, "reshape", (shape,), s, shape)
    c0 = view_term(terms, "reshape", (rows,), c, rows)
    w0 = terms.make("exp", terms[w].attrs, (terms.make("sub", ("$", "$", ()), (s0, c0), shape),), shape)
    return w0 if view_term(terms, "reshape", (tuple(terms.shape(w)),), w0, terms.shape(w)) == w else w


def acc_form(terms: TermStore, t: int, rows: bool = True):
    """``A(S, c, V, K)``: the program's ``exp(S - c) @ V`` (a batched dot, maybe through
    reshapes of its leading dims) -> {"kind", "W", "S", "c", "keys", "rebuild" ...} or None."""
    top = terms[t]
    d = top.children[0] if top.op == "reshape" else t
    dot = terms[d]
    if dot.op != "dot" or len(dot.children) != 2 or len(dot.attrs) != 2 or len(dot.attrs[0]) != 4:
        return None
    (lb, rb, lc, rc), over = dot.attrs
    lhs, rhs = dot.children
    ls, rs = terms.shape(lhs), terms.shape(rhs)
    nb = len(ls) - 2
    if len(rs) != nb + 2 or lb != tuple(range(nb)) or rb != tuple(range(nb)) or lc != (nb + 1,) or rc != (nb,):
        return None
    w = _trailing_view(terms, lhs, ls[-2:])
    w = None if w is None else unviewed(terms, w)
    found = None if w is None else shifted(terms, w)
    if found is None or ls[-1] != rs[-2] or _trailing_view(terms, t, dot.shape[-2:]) != d:
        return None
    ws = terms.shape(w)
    if rows and top.shape[:-1] != ws[:-1]:  # the rows of the result are the rows of S
        return None
    n = ls[-1]
    keys = None
    if over is not None:
        if len(over) != 1 or over[0] is None:
            return None
        pairs = np.frombuffer(over[0], dtype=np.int64).reshape(-1, 2)
        if not np.array_equal(pairs[:, 0], pairs[:, 1]) or len(np.unique(pairs[:, 0])) != len(pairs):
            return None
        keys = _over_keys((np.ascontiguousarray(pairs[:, 0]).tobytes(),), n)
    return {"kind": "A", "t": t, "W": w, "S": found[0], "c": found[1], "keys": keys, "lhs": lhs, "rhs": rhs,
            "dot": d, "top": t if top.op == "reshape" else None}


def lse_form(terms: TermStore, t: int):
    """``LSE(S, K)`` -> (S, keys) (keys None: all), or None."""
    term = terms[t]
    nd = len(term.shape)
    if term.op != "logsumexp" or term.attrs != ((nd - 1,), True, None) or len(term.children) != 1:
        return None
    x = term.children[0]
    g = terms[x]
    if g.op == "gather" and all(v is None for v in g.attrs[:-1]) and g.attrs[-1] is not None:
        s = g.children[0]
        keys = np.frombuffer(g.attrs[-1], dtype=np.int64)
        if len(np.unique(keys)) != len(keys):
            return None
        return s, _over_keys((np.sort(keys).tobytes(),), terms.shape(s)[-1])
    return x, None


# ---------------------------------------------------------------- builders


def _shift_to(terms: TermStore, form: dict, c_new: int) -> int:
    """W(S, c_new) built as the program builds ``exp(S - c_new)``."""
    s = form["S"]
    diff = terms.make("sub", ("$", "$", ()), (s, c_new), terms.shape(s))
    return terms.make("exp", terms[form["W"]].attrs, (diff,), terms.shape(s))


def _rebuild(terms: TermStore, form: dict, w: int, keys) -> int:
    if form["kind"] == "W":
        return w
    if form["kind"] == "L":
        old = terms[form["t"]]
        over = None if keys is None else (np.ascontiguousarray(keys).tobytes(),)
        return terms.make("sum", old.attrs[:2] + (over,), (w,), old.shape)
    ls = tuple(terms.shape(form["lhs"]))
    lhs = w if form["lhs"] == form["W"] else view_term(terms, "reshape", (ls,), w, ls)
    over = None if keys is None else (np.ascontiguousarray(np.stack([keys, keys], 1)).tobytes(),)
    dot = terms[form["dot"]]
    d = terms.make("dot", (dot.attrs[0], over), (lhs, form["rhs"]), dot.shape)
    if form["top"] is None:
        return d
    top = terms[form["top"]]
    return view_term(terms, "reshape", top.attrs, d, top.shape)


def _target(terms: TermStore, form: dict) -> int:
    """softmax(S) @ V, built as the single-device program builds it."""
    s = form["S"]
    sm = rowwise(terms, "softmax", (), [full(terms, s)], 1, [terms.shape(s)])[0].t
    return _rebuild(terms, form, sm, None)


def _union(k1, k2, n: int):
    a, b = key_set(n, k1), key_set(n, k2)
    if (a & b).any():
        return False, None
    u = np.flatnonzero(a | b).astype(np.int64)
    return True, (None if len(u) == n else u)


# ---------------------------------------------------------------- the rewrites on values


def _covered(terms: TermStore, form: dict, vecs) -> bool:
    """On the rows `vecs` holds: the shift is finite, K has an unmasked key, none outside K."""
    fin = finite_rows(terms, form["c"])
    facts = row_facts(terms, form["S"], form["keys"])
    return fin is not None and facts is not None and held_rows(fin, vecs) and held_rows(facts[0], vecs) \
        and held_rows(facts[1], vecs)


def _form(terms: TermStore, t: int):
    return sum_form(terms, t) or acc_form(terms, t)


def _weights_form(terms: TermStore, t: int):
    found = shifted(terms, t)
    return None if found is None else {"kind": "W", "t": t, "W": t, "S": found[0], "c": found[1], "keys": None}


def rescaled(terms: TermStore, val: Val):
    """Rule 1 on a product ``X * exp(c - c')``."""
    term = terms[val.t]
    if term.op != "mul" or len(term.children) != 2:
        return None
    for x, f in (term.children, term.children[::-1]):
        form = _form(terms, x) or _weights_form(terms, x)
        fs = terms[f]
        if form is None or fs.op != "exp" or len(fs.children) != 1 or terms.shape(x) != term.shape:
            continue
        lin = terms[fs.children[0]]
        if lin.op != "lin" or sorted(lin.attrs) != [-1, 1] or dict(zip(lin.attrs, lin.children))[1] != form["c"]:
            continue
        c_new = dict(zip(lin.attrs, lin.children))[-1]
        if fs.shape != terms.shape(form["c"]) or terms.shape(c_new) != fs.shape:
            continue
        f_old, f_new = finite_rows(terms, form["c"]), finite_rows(terms, c_new)
        rows = val.vecs[:-1]
        if f_old is None or f_new is None or not (held_rows(f_old, rows) and held_rows(f_new, rows)):
            continue
        return Val(_rebuild(terms, form, _shift_to(terms, form, c_new), form["keys"]), val.vecs)
    return None


def merged(terms: TermStore, val: Val):
    """Rule 2 on a sum of partial L (or A) over disjoint key sets with one shift."""
    term = terms[val.t]
    if term.op != "lin" or len(term.children) < 2 or any(c != 1 for c in term.attrs):
        return None
    forms = [_form(terms, c) for c in term.children]
    if any(f is None for f in forms):
        return None
    first = forms[0]
    same = ("kind", "S", "c", "W") + (("rhs", "lhs", "dot", "top") if first["kind"] == "A" else ())
    keys, n = first["keys"], terms.shape(first["S"])[-1]
    for f in forms[1:]:
        if any(f[k] != first[k] for k in same if k not in ("lhs", "dot", "top")) or \
                (first["kind"] == "A" and not _same_structure(terms, first, f)):
            return None
        ok, keys = _union(keys, f["keys"], n)
        if not ok:  # overlapping key sets: a block counted twice
            return None
    return Val(_rebuild(terms, first, first["W"], keys), val.vecs)


def _same_structure(terms: TermStore, a: dict, b: dict) -> bool:
    da, db = terms[a["dot"]], terms[b["dot"]]
    ta = None if a["top"] is None else terms[a["top"]].attrs
    tb = None if b["top"] is None else terms[b["top"]].attrs
    la = terms.shape(a["lhs"]) if a["lhs"] != a["W"] else None
    lb = terms.shape(b["lhs"]) if b["lhs"] != b["W"] else None
    return da.attrs[0] == db.attrs[0] and ta == tb and la == lb and a["rhs"] == b["rhs"]


def normalized(terms: TermStore, val: Val):
    """Rule 4: ``A / L`` with one shift and key set, or ``A`` shifted by its own LSE."""
    term = terms[val.t]
    if term.op == "div" and len(term.children) == 2 and term.attrs[:2] == ("$", "$") \
            and term.attrs[2] == (("rounding_mode", None),):
        a, l = acc_form(terms, term.children[0]), sum_form(terms, term.children[1])
        if a is None or l is None or a["W"] != l["W"] or not _same_keys(a["keys"], l["keys"]):
            return None
        return Val(_target(terms, a), val.vecs) if _covered(terms, a, val.vecs[:-1]) else None
    a = acc_form(terms, val.t)
    lse = None if a is None else lse_form(terms, a["c"])
    if lse is None or lse[0] != a["S"] or not _same_keys(lse[1], a["keys"]):
        return None
    return Val(_target(terms, a), val.vecs) if _covered(terms, a, val.vecs[:-1]) else None


def _same_keys(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(np.sort(a), np.sort(b)))


def lse_merged(terms: TermStore, val: Val):
    """Rule 3 on ``logaddexp(LSE(S, K1), LSE(S, K2))``."""
    term = terms[val.t]
    if term.op != "logaddexp" or len(term.children) != 2:
        return None
    f1, f2 = lse_form(terms, term.children[0]), lse_form(terms, term.children[1])
    if f1 is None or f2 is None or f1[0] != f2[0]:
        return None
    s = f1[0]
    ss = terms.shape(s)
    ok, keys = _union(f1[1], f2[1], ss[-1])
    if not ok:
        return None
    x = s
    if keys is not None:
        sel = (None,) * (len(ss) - 1) + (np.ascontiguousarray(keys).tobytes(),)
        x = terms.make("gather", sel, (s,), ss[:-1] + (len(keys),))
    return Val(terms.make("logsumexp", ((len(ss) - 1,), True, None), (x,), term.shape), val.vecs)


def normal_form(terms: TermStore, val):
    """The value after the lemma's rewrites (the value itself when none applies)."""
    if not isinstance(val, Val):
        return val
    for rule in (rescaled, merged, lse_merged):
        out = rule(terms, val)
        if out is not None:
            val = out
            break
    done = normalized(terms, val)
    return val if done is None else done


# ---------------------------------------------------------------- legitimate intermediates


def _shift_of(terms: TermStore, c: int, s: int) -> bool:
    """Whether `c` is a running max or log-sum-exp of some columns of the scores `s`."""
    term = terms[c]
    nd = len(term.shape)
    if term.op == "amax" and len(term.attrs) == 3 and term.attrs[:2] == ((nd - 1,), True):
        return term.children[0] == s
    lse = lse_form(terms, c)
    if lse is not None:
        return lse[0] == s
    if term.op in ("maximum", "logaddexp") and len(term.children) == 2:
        return all(_shift_of(terms, k, s) for k in term.children)
    return False


def partial_state(terms: TermStore, t: int, known):
    """(S, role) when `t` is a state of an online softmax over single-device scores S
    (``known(S)``): a block's or running max / log-sum-exp (role "shift"), ``exp(S - c)``,
    S - c, views of it and a rescaling factor ``exp(c - c')`` ("weights"), a partial sum L or
    accumulator A over some key set ("sum"); else None. Used to tell a legitimate
    intermediate from a broken one when localizing (never to prove)."""
    term = terms[t]
    while term.op == "reshape":
        t, term = term.children[0], terms[term.children[0]]
    if term.op == "exp":
        t = unviewed(terms, t)
        term = terms[t]
    if term.op in ("amax", "logsumexp", "maximum", "logaddexp"):
        s = _scores(terms, t, known)
        return None if s is None else (s, State("shift", t, None))
    form = sum_form(terms, t) or acc_form(terms, t, rows=False)
    pair = (form["S"], form["c"]) if form is not None else \
        shifted(terms, t) if term.op == "exp" else _split(terms, t, term.shape)
    if pair is not None:
        state = State("sum", pair[1], form["keys"]) if form is not None else State("weights", pair[1], None)
        return (pair[0], state) if known(pair[0]) and _shift_of(terms, pair[1], pair[0]) else None
    inner = terms[term.children[0]] if term.op == "exp" and term.children else term
    if inner.op == "lin" and sorted(inner.attrs) == [-1, 1] and len(inner.children) == 2:  # c - c'
        found = [_scores(terms, k, known) for k in inner.children]
        return (found[0], State("weights", None, None)) if found[0] is not None and found[0] == found[1] else None
    return None


class State:
    """The role of an online-softmax state ("shift", "weights" or "sum"), its shift term and
    its key set (None: all), for naming the bug where states meet wrongly."""

    def __init__(self, role: str, shift, keys):
        self.role, self.shift, self.keys = role, shift, keys

    def __str__(self) -> str:
        return self.role

    def overlaps(self, other: "State", n: int) -> bool:
        return bool((key_set(n, self.keys) & key_set(n, other.keys)).any())


def _scores(terms: TermStore, c: int, known):
    """The single-device scores S when `c` is a shift (max / log-sum-exp of columns) of them."""
    s = terms[c].children[0] if terms[c].children else None
    while s is not None and not known(s) and terms[s].op in ("maximum", "logaddexp", "amax", "logsumexp", "gather") \
            and terms[s].children:
        s = terms[s].children[0]
    return s if s is not None and known(s) and _shift_of(terms, c, s) else None
