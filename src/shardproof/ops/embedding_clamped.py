"""The embedding gradient of a vocab-parallel lookup written clamp-and-mask (torchtitan's, and
DTensor's ``_MaskPartial``-free form): local ids ``clamp(ids - lo, 0, B - 1)`` and the incoming
gradient multiplied by the in-block mask ``lo <= ids < lo + B``. Then

    onehot(clamp(ids - lo, 0, B - 1), B)ᵀ · (g · inside) = rows [lo, lo + B) of onehot(ids, V)ᵀ · g

for every V >= lo + B: a token inside the block looks up row ids - lo; one outside contributes
nothing (its gradient row is zero), wherever the clamp sends it. Exact.

``clamped_block(terms, ids_t, g_t, size)`` -> (raw ids term, g's unmasked term, lo, hi) or None."""
from __future__ import annotations


def _const(a):
    return a if isinstance(a, int) and not isinstance(a, bool) else None


def _clamped(terms, t: int, size: int):
    c = terms[t]
    if c.op != "clamp" or len(c.children) != 1 or len(c.attrs) < 3 or c.attrs[1] != 0 or c.attrs[2] != size - 1:
        return None
    inner = terms[c.children[0]]
    if inner.op == "sub" and len(inner.children) == 1 and _const(inner.attrs[1]) is not None:
        return inner.children[0], inner.attrs[1]
    return c.children[0], 0


def _inside(terms, t: int, raw: int, lo: int, hi: int) -> bool:
    m = terms[t]
    while m.op == "reshape":
        m = terms[m.children[0]]
    if m.op != "and" or len(m.children) != 2:
        return False
    found = set()
    for k in m.children:
        c = terms[k]
        if c.op in ("ge", "lt") and c.children == (raw,) and len(c.attrs) >= 2:
            found.add((c.op, c.attrs[1]))
    return found == {("ge", lo), ("lt", hi)}


def clamped_block(terms, ids_t: int, g_t: int, size: int):
    found = _clamped(terms, ids_t, size)
    if found is None:
        return None
    raw, lo = found
    hi = lo + size
    g = terms[g_t]
    if g.op != "mul" or len(g.children) != 2:
        return None
    for mask, inner in (g.children, g.children[::-1]):
        if terms.shape(inner) == g.shape and _inside(terms, mask, raw, lo, hi):
            return raw, inner, lo, hi
    return None
