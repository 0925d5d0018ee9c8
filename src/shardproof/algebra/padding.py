"""Zero padding (a :class:`~shardproof.relations.spec.Padded` relation's layout positions past
a dim's end): the padded term is ``pad-cat(x, 0)``, a ``cat`` marked ``(dim, "pad")``, and
ops distribute over its pieces as they are built, so that the padding's own piece is
computed apart from the real one and disappears where it is exactly zero:

- an elementwise op, a reduction over other dims, a view, a contraction's free or batch
  dim: ``f(cat(a, p)) = cat(f(a), f(p))`` (pieces at the same boundaries in every operand
  that spans the dim; operands broadcast along it go to every piece);
- ``0·x = 0``, ``x + 0 = x``, a sum or contraction over zeros is 0 (exact in real
  arithmetic for finite x);
- a contraction over a padded dim keeps only the pairs where neither side is a zero piece:
  ``Σ cat(a, 0)·cat(b, q) = Σ a·b``, and a rank's partial contraction over its block becomes
  one over the real positions it holds, which the collective completes like any other.

What is not zero stays visible: a softmax or a mean over padded positions, a bias added to
the padding, are terms the single-device program never builds, so they never verify.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .layout import Val, _group_dims, prod
from .lemmas import linear
from .padding_base import PAD, _extents, is_zero, pad_cat, zero
from .terms import TermStore, rewrite_any

def padded_val(terms: TermStore, t: int, vecs: tuple, padding: int = 0) -> Val:
    """``Val(t, vecs)`` where positions at or past a dim's end hold zero: the term gets a
    zero piece along each such dim, `padding` long (as a Padded relation says, so that every
    rank's value selects from the same term) or as long as the positions reach."""
    for d, v in enumerate(vecs):
        shape = terms.shape(t)
        if v is not None and len(v) and int(np.max(v)) >= shape[d]:
            extra = list(shape)
            extra[d] = max(int(np.max(v)) + 1 - shape[d], padding)
            grown = list(shape)
            grown[d] = shape[d] + extra[d]
            t = terms.make("cat", (d, PAD), (t, zero(terms, extra)), tuple(grown))
    return Val(t, tuple(vecs))


def unpadded_positions(terms: TermStore, sval: Val, dval: Val, want: tuple) -> bool:
    """Whether `dval` holds exactly the positions `want` of `sval` (a layout whose positions
    past a dim's end stand for zero padding): `dval` selects from `sval`'s term or from a
    padding cat of it and zeros, the same elements where `want` is real, a zero where
    `want` has padding."""
    from .layout import shape_of, vec_array
    base, zero_from = dval.t, set()
    while base != sval.t:
        found = pad_cat(terms, base)
        if found is None or len(found[1]) != 2 or not is_zero(terms, found[1][1]):
            return False
        zero_from.add(found[0])
        base = found[1][0]
    ts, local = terms.shape(sval.t), shape_of(terms, sval)
    for d, (have, w) in enumerate(zip(dval.vecs, want)):
        h = vec_array(have, terms.shape(dval.t)[d])
        w = np.arange(local[d]) if w is None else np.asarray(w)
        if len(h) != len(w):
            return False
        pad_h, pad_w = h >= ts[d], w >= local[d]
        if (pad_h.any() and d not in zero_from) or not np.array_equal(pad_h, pad_w):
            return False
        if not np.array_equal(h[~pad_h], vec_array(sval.vecs[d], ts[d])[w[~pad_w]]):
            return False
    return True


def real_part(terms: TermStore, val: Val):
    """`val` without its padding: (its positions in the real pieces, as a value of those,
    and whether every padding piece it holds is zero), or None when it holds no padding
    cat; None too when it holds padding only."""
    from .layout import take, vec_array
    found = pad_cat(terms, val.t)
    if found is None:
        return None
    d, pieces = found
    pos = vec_array(val.vecs[d], terms.shape(val.t)[d])
    n = terms.shape(pieces[0])[d]
    keep = np.flatnonzero(pos < n)
    if not len(keep):
        return None
    starts = np.cumsum([0] + list(_extents(terms, pieces, d)))
    which = np.searchsorted(starts, pos[pos >= n], side="right") - 1
    zero_pad = all(is_zero(terms, pieces[w]) for w in set(which.tolist()))
    inner = take(terms, val, d, keep)
    deeper = real_part(terms, inner)
    if deeper is not None:
        return deeper[0], deeper[1] and zero_pad
    return inner, zero_pad


def _join(terms: TermStore, parts: list[int], dim: int, shape) -> int:
    if all(is_zero(terms, p) for p in parts):
        return zero(terms, shape)
    return terms.make("cat", (dim, PAD), tuple(parts), tuple(shape))


def _with_dim(shape, dim: int, size: int) -> tuple:
    return tuple(size if k == dim else s for k, s in enumerate(shape))


def _cut(terms: TermStore, t: int, dim: int, extents: tuple):
    """`t` cut along `dim` into pieces of `extents`: a padding cat at those boundaries, or
    a constant fill; None otherwise."""
    found = pad_cat(terms, t)
    if found is not None and found[0] == dim and _extents(terms, found[1], dim) == extents:
        return list(found[1])
    term = terms[t]
    if term.op == "fill" and not term.children:
        return [terms.make("fill", term.attrs, (), _with_dim(term.shape, dim, e)) for e in extents]
    return None


def _first_padded(terms: TermStore, children, dims_of):
    """(child index, its dim, the out dim, extents) of the first operand that is a padding
    cat along a dim it does not broadcast."""
    for i, c in enumerate(children):
        found = pad_cat(terms, c)
        if found is not None:
            out_dim = dims_of(i, found[0])
            if out_dim is not None:
                return i, found[0], out_dim, _extents(terms, found[1], found[0])
    return None


# ---------------------------------------------------------------- elementwise

def _elementwise(terms, op, attrs, children, shape):
    nd = len(shape)
    if op == "mul" and any(is_zero(terms, c) for c in children):
        return zero(terms, shape)
    if op in ("scale", "cast", "neg", "lin") and all(is_zero(terms, c) for c in children):
        return zero(terms, shape)
    if op == "lin" and any(is_zero(terms, c) for c in children):
        kept = {c: w for c, w in zip(children, attrs) if not is_zero(terms, c)}
        out = linear(terms, kept, shape)
        return out if out is not None else zero(terms, shape)

    def out_dim(i, d):
        k = d + nd - len(terms.shape(children[i]))
        return k if terms.shape(children[i])[d] == shape[k] and shape[k] > 1 else None
    found = _first_padded(terms, children, out_dim)
    if found is None:
        return None
    _, _, k, extents = found
    cuts = []
    for c in children:
        cs = terms.shape(c)
        d = k - (nd - len(cs))
        if d < 0 or cs[d] == 1:
            cuts.append([c] * len(extents))
            continue
        pieces = _cut(terms, c, d, extents)
        if pieces is None:
            return None
        cuts.append(pieces)
    parts = [terms.make(op, attrs, tuple(cut[n] for cut in cuts), _with_dim(shape, k, e))
             for n, e in enumerate(extents)]
    return _join(terms, parts, k, shape)


# ---------------------------------------------------------------- views

def _reshape(terms, attrs, children, shape):
    found = pad_cat(terms, children[0])
    if found is None:
        return None
    d, pieces = found
    old = terms.shape(children[0])
    try:
        groups = _group_dims(old, shape)
    except ValueError:
        return None
    for go, gn in groups:
        if d not in go:
            continue
        if d != go[0] or not gn:
            return None
        inner_old = prod(old[k] for k in go[1:])
        inner_new = prod(shape[k] for k in gn[1:])
        sizes = []
        for e in _extents(terms, pieces, d):
            if (e * inner_old) % inner_new:
                return None
            sizes.append(e * inner_old // inner_new)
        parts = [terms.make("reshape", (_with_dim(shape, gn[0], s),), (p,), _with_dim(shape, gn[0], s))
                 for p, s in zip(pieces, sizes)]
        return _join(terms, parts, gn[0], shape)
    return None


def _permute(terms, attrs, children, shape):
    found = pad_cat(terms, children[0])
    if found is None:
        return None
    d, pieces = found
    perm = attrs[0]
    k = list(perm).index(d)
    parts = []
    for p in pieces:
        ps = terms.shape(p)
        parts.append(terms.make("permute", attrs, (p,), tuple(ps[q] for q in perm)))
    return _join(terms, parts, k, shape)


def _fill_view(terms, op, attrs, children, shape):
    return zero(terms, shape) if children and is_zero(terms, children[0]) else None


def _cat_of_padded(terms, attrs, children, shape):
    """A cat along another dim of padding cats at the same boundaries is a padding cat of
    cats (the two halves of a rotary embedding, each padded by head)."""
    if len(attrs) != 1:
        return None
    dim = attrs[0]
    found = _first_padded(terms, children, lambda i, d: d if d != dim else None)
    if found is None:
        return None
    _, d, _, extents = found
    cuts = [_cut(terms, c, d, extents) for c in children]
    if any(c is None for c in cuts):
        return None
    parts = []
    for n, e in enumerate(extents):
        kids = tuple(cut[n] for cut in cuts)
        pshape = _with_dim(shape, d, e)
        parts.append(zero(terms, pshape) if all(is_zero(terms, c) for c in kids)
                     else terms.make("cat", attrs, kids, pshape))
    return _join(terms, parts, d, shape)


def _gather(terms, attrs, children, shape):
    """A selection of a padding cat: along other dims, a padding cat of the pieces'
    selections; along its dim, inside one piece, that piece's."""
    if is_zero(terms, children[0]):
        return zero(terms, shape)
    found = pad_cat(terms, children[0])
    if found is None:
        return None
    d, pieces = found
    if attrs[d] is None:
        parts = [terms.make("gather", attrs, (p,), _with_dim(shape, d, terms.shape(p)[d])) for p in pieces]
        return _join(terms, parts, d, shape)
    sel = np.frombuffer(attrs[d], dtype=np.int64)
    starts = np.cumsum([0] + list(_extents(terms, pieces, d)))
    which = np.searchsorted(starts, sel, side="right") - 1
    if not len(sel) or (which != which[0]).any():
        return None
    k = int(which[0])
    inner = list(attrs)
    local = sel - starts[k]
    inner[d] = None if len(local) == starts[k + 1] - starts[k] and np.array_equal(local, np.arange(len(local))) \
        else np.ascontiguousarray(local).tobytes()
    if all(a is None for a in inner):
        return pieces[k]
    return terms.make("gather", tuple(inner), (pieces[k],), shape)


def pad_join(terms: TermStore, real: Val, dim: int, positions: np.ndarray, is_pad: np.ndarray, pad_size: int) -> Val:
    """A value whose `dim` holds `real`'s positions where `is_pad` is false and zero
    padding elsewhere (`positions` there: offsets into padding of `pad_size`)."""
    n = terms.shape(real.t)[dim]
    vec = np.empty(len(is_pad), dtype=np.int64)
    vec[~is_pad] = np.arange(n, dtype=np.int64) if real.vecs[dim] is None else real.vecs[dim]
    vec[is_pad] = n + positions[is_pad]
    grown = _with_dim(terms.shape(real.t), dim, n + pad_size)
    t = terms.make("cat", (dim, PAD), (real.t, zero(terms, _with_dim(grown, dim, pad_size))), grown)
    vecs = list(real.vecs)
    vecs[dim] = vec
    return Val(t, tuple(vecs))


def padded_batch(terms: TermStore, a: Val, b: Val, lhs_batch, rhs_batch):
    """For a contraction whose operands hold zero padding along a batch dim: (k, the
    operands restricted to the real positions of batch pair k, the pad mask, offsets into
    the padding, its size), when every position is real in both operands or zero in one;
    else None. The product at a padding position is zero (0·x = 0)."""
    from .layout import take, vec_array
    for k, (i, j) in enumerate(zip(lhs_batch, rhs_batch)):
        sides = []
        for val, d in ((a, i), (b, j)):
            pos = vec_array(val.vecs[d], terms.shape(val.t)[d])
            found = pad_cat(terms, val.t)
            if found is None or found[0] != d:
                sides.append((pos, np.zeros(len(pos), np.int64), None))
                continue
            starts = np.cumsum([0] + list(_extents(terms, found[1], d)))
            which = np.searchsorted(starts, pos, side="right") - 1
            zeros = np.array([is_zero(terms, found[1][w]) for w in which], dtype=bool)
            sides.append((pos, which, (starts, zeros)))
        if sides[0][2] is None and sides[1][2] is None:
            continue
        zero_at = np.zeros(len(sides[0][0]), dtype=bool)
        for _, which, info in sides:
            if info is not None:
                zero_at |= info[1]
        real = ~zero_at
        if not zero_at.any() or (sides[0][1][real] != 0).any() or (sides[1][1][real] != 0).any():
            return None
        offsets = np.cumsum(zero_at) - 1
        keep = np.flatnonzero(real)
        return k, take(terms, a, i, keep), take(terms, b, j, keep), zero_at, offsets, int(zero_at.sum())
    return None


# ---------------------------------------------------------------- reductions

def _reduction(terms, op, attrs, children, shape):
    dims, keepdim, over = attrs[0], attrs[1], attrs[2] if len(attrs) > 2 else None  # a lemma's lse: no over
    x = children[0]
    if is_zero(terms, x) and op in ("sum", "amax", "amin", "max", "min"):
        return zero(terms, shape)
    found = pad_cat(terms, x)
    if found is None:
        return None
    d, pieces = found
    if d in dims and over is not None and over[list(dims).index(d)] is not None:
        return _partial_sum(terms, op, attrs, pieces, d, shape) if op == "sum" else None
    if d in dims:
        if op != "sum":
            return None
        kept = [p for p in pieces if not is_zero(terms, p)]
        sums = [terms.make(op, attrs, (p,), shape) for p in kept]
        if not sums:
            return zero(terms, shape)
        if len(sums) == 1:
            return sums[0]
        return linear(terms, {s: Fraction(1) for s in sums}, shape)
    k = d if keepdim else d - sum(1 for q in dims if q < d)
    parts = [terms.make(op, attrs, (p,), _with_dim(shape, k, terms.shape(p)[d])) for p in pieces]
    return _join(terms, parts, k, shape)


def _partial_sum(terms, op, attrs, pieces, d, shape):
    """A sum over some positions of a padding cat's dim (a rank's share): the positions in
    zero pieces add nothing; the rest, all real, are a share of the real piece's sum."""
    dims, keepdim, over = attrs[0], attrs[1], attrs[2]
    k = list(dims).index(d)
    pos = np.frombuffer(over[k], dtype=np.int64)
    starts = np.cumsum([0] + list(_extents(terms, pieces, d)))
    which = np.searchsorted(starts, pos, side="right") - 1
    keep = ~np.array([is_zero(terms, pieces[w]) for w in which], dtype=bool)
    if not keep.any():
        return zero(terms, shape)
    if (which[keep] != 0).any():
        return None
    real = pos[keep]
    n = terms.shape(pieces[0])[d]
    key = None if len(real) == n and np.array_equal(np.sort(real), np.arange(n)) else np.sort(real).tobytes()
    new_over = over[:k] + (key,) + over[k + 1:]
    if all(o is None for o in new_over):
        new_over = None
    return terms.make(op, (dims, keepdim, new_over) + tuple(attrs[3:]), (pieces[0],), shape)


# ---------------------------------------------------------------- contractions

def _pairs(key, asize: int, bsize: int) -> np.ndarray:
    if key is None:
        return np.stack([np.arange(asize), np.arange(bsize)], 1) if asize == bsize else None
    return np.frombuffer(key, dtype=np.int64).reshape(-1, 2)


def _piece_of(terms: TermStore, t: int, dim: int):
    """Per position of `dim`: (piece index, offset) and the pieces, for a padding cat."""
    found = pad_cat(terms, t)
    if found is None or found[0] != dim:
        return None
    starts = np.cumsum([0] + list(_extents(terms, found[1], dim)))
    return starts, found[1]


def _dot(terms, attrs, children, shape):
    a, b = children
    if is_zero(terms, a) or is_zero(terms, b):
        return zero(terms, shape)
    spec, over = attrs[0], attrs[1]
    lb, rb, lc, rc = spec[:4]
    pairings = spec[4] if len(spec) > 4 else None
    ash, bsh = terms.shape(a), terms.shape(b)
    # a contracted pair of dims through padding: keep the pairs that are real on both sides
    for n, (i, j) in enumerate(zip(lc, rc)):
        pa, pb = _piece_of(terms, a, i), _piece_of(terms, b, j)
        if pa is None and pb is None:
            continue
        pairs = _pairs(over[n] if over else None, ash[i], bsh[j])
        if pairs is None:
            return None
        keep = np.ones(len(pairs), dtype=bool)
        sides = []
        for col, found, t in ((0, pa, a), (1, pb, b)):
            if found is None:
                sides.append(None)
                continue
            starts, pieces = found
            which = np.searchsorted(starts, pairs[:, col], side="right") - 1
            keep &= ~np.array([is_zero(terms, pieces[w]) for w in which], dtype=bool)
            sides.append((which, pieces))
        pairs = pairs[keep]
        new_children, sizes = [a, b], [ash[i], bsh[j]]
        for col, side in enumerate(sides):
            if side is None:
                continue
            which, pieces = side[0][keep], side[1]
            if len(which) and (which != 0).any():
                return None  # a real position paired with padding that is not zero: leave it
            new_children[col] = pieces[0]
            sizes[col] = terms.shape(pieces[0])[(i, j)[col]]
        if not len(pairs):
            return zero(terms, shape)
        if new_children == [a, b]:
            return None
        whole = sizes[0] == sizes[1] and len(pairs) == sizes[0] and np.array_equal(pairs[:, 0], pairs[:, 1]) \
            and np.array_equal(np.sort(pairs[:, 0]), np.arange(sizes[0]))
        key = None if whole else np.ascontiguousarray(pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]).tobytes()
        new_over = tuple(key if m == n else o for m, o in enumerate(over)) if over else \
            tuple(key if m == n else None for m in range(len(lc)))
        if all(o is None for o in new_over):
            new_over = None
        return terms.make("dot", (spec, new_over), tuple(new_children), shape)
    # a free dim through padding: the product's rows (or columns) follow it
    lfree = [d for d in range(len(ash)) if d not in lb and d not in lc]
    rfree = [d for d in range(len(bsh)) if d not in rb and d not in rc]
    for col, t, free, base in ((0, a, lfree, len(lb)), (1, b, rfree, len(lb) + len(lfree))):
        found = pad_cat(terms, t)
        if found is None or found[0] not in free:
            continue
        d, pieces = found
        k = base + free.index(d)
        parts = []
        for p in pieces:
            kids = (p, b) if col == 0 else (a, p)
            parts.append(terms.make("dot", attrs, kids, _with_dim(shape, k, terms.shape(p)[d])))
        return _join(terms, parts, k, shape)
    # a batch dim through padding in both operands at the same boundaries (no pairing)
    for n, (i, j) in enumerate(zip(lb, rb)):
        if pairings is not None and pairings[n] is not None:
            continue
        found = pad_cat(terms, a)
        if found is None or found[0] != i:
            continue
        extents = _extents(terms, found[1], i)
        other = _cut(terms, b, j, extents)
        if other is None:
            return None
        parts = [terms.make("dot", attrs, (p, q), _with_dim(shape, n, terms.shape(p)[i]))
                 for p, q in zip(found[1], other)]
        return _join(terms, parts, n, shape)
    return None


@rewrite_any
def through_padding(terms: TermStore, op: str, attrs, children, shape):
    """Distribute an op over the pieces of a padding cat (module docstring)."""
    if not children:
        return None
    if op in terms.elementwise_ops or op in ("lin", "scale"):
        return _elementwise(terms, op, attrs, children, shape)
    if op == "reshape":
        return _fill_view(terms, op, attrs, children, shape) or _reshape(terms, attrs, children, shape)
    if op == "permute":
        return _fill_view(terms, op, attrs, children, shape) or _permute(terms, attrs, children, shape)
    if op == "cat":
        return _cat_of_padded(terms, attrs, children, shape)
    if op in terms.reduction_ops:
        return _reduction(terms, op, attrs, children, shape)
    if op == "dot":
        return _dot(terms, attrs, children, shape)
    if op == "gather":
        return _gather(terms, attrs, children, shape)
    return None
