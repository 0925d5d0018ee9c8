"""Soundness of the vocab-parallel lookup lemmas (issue 15), torch as the judge: torchtitan's
clamp-then-mask form ``embedding(W[lo:hi], clamp(ids - lo, a, b)) * ((ids >= lo) & (ids < hi))``,
Megatron's where-masked form, and the sum over ranks' blocks are built as terms in one store
(the rewrites run as they are made) for random tables, ids, blocks and clamp bounds, and every
term is claimed with torch's value of its spelling: two spellings that share a term must have
equal values. Ids outside the block, outside every block of a partial tiling, and at the block's
ends are always drawn; wrong mask boundaries and narrowed clamps must not reach the lookup's term."""
import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.algebra.layout import full, materialize, take
from shardproof.algebra.lemmas import _tiled_lookups
from shardproof.algebra.terms import TermStore

from .core import Claims, examples

SETTINGS = settings(max_examples=examples(60), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])


class Builder:
    """Terms of one table W [V, D] and ids, as the capture's rules make them."""

    def __init__(self, weight: torch.Tensor, ids: torch.Tensor):
        self.terms = TermStore()
        self.weight, self.ids = weight, ids
        self.W = self.terms.make("input", ("weight", "f64"), (), tuple(weight.shape))
        self.I = self.terms.make("input", ("ids", "i64"), (), tuple(ids.shape))
        self.shape = tuple(ids.shape)

    def cmp(self, op: str, c: int) -> int:
        return self.terms.make(op, ("$", c, ()), (self.I,), self.shape)

    def both(self, op: str, a: int, b: int) -> int:
        return self.terms.make(op, ("$", "$", ()), tuple(sorted((a, b))), self.shape)

    def block(self, lo: int, hi: int) -> int:
        """Rows [lo, hi) of W as the engine gives an operand: materialized (the whole W unchanged)."""
        val = materialize(self.terms, take(self.terms, full(self.terms, self.W), 0, np.arange(lo, hi)))
        assert all(v is None for v in val.vecs)
        return val.t

    def lookup(self, table: int, ids: int) -> int:
        return self.terms.make("embedding", (), (table, ids), self.shape + (self.weight.shape[1],))

    def unsqueezed(self, mask: int) -> int:
        return self.terms.make("reshape", (self.shape + (1,),), (mask,), self.shape + (1,))

    def clamp_form(self, lo: int, rows: int, a: int, b: int, mask_lo: int, mask_hi: int):
        """torchtitan: (term, torch value) of embedding(W[lo:lo+rows], clamp(ids - lo, a, b)) * mask."""
        t = self.terms
        shifted = t.make("sub", ("$", lo, ()), (self.I,), self.shape)
        clamped = t.make("clamp", ("$", a, b, ()), (shifted,), self.shape)
        emb = self.lookup(self.block(lo, lo + rows), clamped)
        mask = self.both("and", self.cmp("ge", mask_lo), self.cmp("lt", mask_hi))
        out = t.make("mul", (), tuple(sorted((emb, self.unsqueezed(mask)))), t.shape(emb))
        inside = (self.ids >= mask_lo) & (self.ids < mask_hi)
        value = F.embedding((self.ids - lo).clamp(a, b), self.weight[lo:lo + rows]) * inside.unsqueeze(-1).double()
        return out, value

    def where_form(self, lo: int, hi: int):
        """Megatron: where(outside, 0, embedding(W[lo:hi], where(outside, 0, ids - lo)))."""
        t = self.terms
        outside = self.both("or", self.cmp("lt", lo), self.cmp("ge", hi))
        shifted = t.make("sub", ("$", lo, ()), (self.I,), self.shape)
        local = t.make("where", ("$", 0, "$", ()), (outside, shifted), self.shape)
        emb = self.lookup(self.block(lo, hi), local)
        out = t.make("where", ("$", 0, "$", ()), (self.unsqueezed(outside), emb), t.shape(emb))
        mask = (self.ids < lo) | (self.ids >= hi)
        value = F.embedding(torch.where(mask, 0, self.ids - lo), self.weight[lo:hi]).masked_fill(mask.unsqueeze(-1), 0)
        return out, value


@st.composite
def _drawn(draw):
    vocab = draw(st.integers(2, 12))
    lo = draw(st.integers(0, vocab - 1))
    hi = draw(st.integers(lo + 1, vocab))
    n = draw(st.integers(1, 8))
    # every id at and around the block's ends, then random ones (ids out of the block included)
    ends = [i for i in (lo - 1, lo, hi - 1, hi) if 0 <= i < vocab]
    rest = draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n))
    cuts = sorted(set(draw(st.lists(st.integers(1, vocab), min_size=1, max_size=4))))
    a = draw(st.sampled_from([0, 0, -1, -5, 1]))
    b = draw(st.sampled_from([hi - lo - 1, hi - lo - 1, hi - lo + 3, hi - lo - 2]))
    seed = draw(st.integers(0, 2 ** 16))
    return vocab, lo, hi, ends + rest, cuts, a, b, seed


@SETTINGS
@given(_drawn())
def test_clamp_then_mask_holds_torch_values(drawn):
    vocab, lo, hi, ids, cuts, a, b, seed = drawn
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, 3, generator=g, dtype=torch.float64)
    ids = torch.tensor(ids, dtype=torch.int64)
    bld = Builder(weight, ids)
    claims = Claims(bld.terms, 1e-12)
    rows = hi - lo
    where_t, where_v = bld.where_form(lo, hi)
    claims.add(full(bld.terms, where_t), where_v.numpy(), "Megatron's where-masked lookup")
    assert bld.terms[where_t].op == ("embedding" if rows == vocab else "range_lookup")

    keeps = a <= 0 <= rows - 1 <= b
    reachable = (ids - lo).clamp(a, b)
    if bool(((reachable >= 0) & (reachable < rows)).all()):  # else torch refuses the lookup (IndexError)
        t, v = bld.clamp_form(lo, rows, a, b, lo, hi)
        claims.add(full(bld.terms, t), v.numpy(), f"clamp({a}, {b}) then mask [{lo}, {hi})")
        if keeps:  # the lemma's premise: the clamp is the identity on the block
            assert t == where_t, bld.terms.describe(t)  # one normal form for both spellings
        elif not torch.equal(v, where_v):
            assert t != where_t

    # a wrong mask boundary: one id too many or too few at either end
    for mlo, mhi in ((lo - 1, hi), (lo + 1, hi), (lo, hi - 1), (lo, hi + 1)):
        t, v = bld.clamp_form(lo, rows, 0, rows - 1, mlo, mhi)
        claims.add(full(bld.terms, t), v.numpy(), f"mask [{mlo}, {mhi}) on the block [{lo}, {hi})")
        if not torch.equal(v, where_v):
            assert t != where_t, (mlo, mhi)

    # the ranks' pieces over blocks [0, c1), [c1, c2), ...: the lookup where they tile the table
    bounds = [0] + cuts
    pieces, total = [], torch.zeros(len(ids), 3, dtype=torch.float64)
    for p, q in zip(bounds, bounds[1:]):
        t, v = bld.clamp_form(p, q - p, 0, q - p - 1, p, q)
        claims.add(full(bld.terms, t), v.numpy(), f"piece [{p}, {q})")
        pieces.append(t)
        total += v
    # one block of the whole table is the lookup itself (a group of one); more are summed by the lemma
    summed = pieces[0] if len(pieces) == 1 and bld.terms[pieces[0]].op == "embedding" else _tiled_lookups(bld.terms, pieces)
    whole = bld.lookup(bld.W, bld.I)
    claims.add(full(bld.terms, whole), F.embedding(ids, weight).numpy(), "the single device's lookup")
    if summed is not None:
        claims.add(full(bld.terms, summed), total.numpy(), "the sum of the pieces")
    assert (summed == whole) == (bounds[-1] == vocab), (bounds, vocab)  # ids past the last block: no lemma
