"""A term a rewrite turned into another form (a view of a sum, distributed over its parts by
shardproof.algebra.normal) is found by ``TermStore.lookup`` as what it became, so a reshape of
the other program picks the split the first program built (sp_replicated_train regressed to
unknown at aten.view without it)."""
from fractions import Fraction

from shardproof.algebra import normal  # noqa: F401  (registers the view-of-sum rewrite)
from shardproof.algebra.layout import _reshape_built
from shardproof.algebra.lemmas import linear
from shardproof.algebra.terms import TermStore


def test_lookup_finds_the_rewritten_view_of_a_sum():
    terms = TermStore()
    a = terms.make("input", ("a",), (), (4, 6))
    b = terms.make("input", ("b",), (), (4, 6))
    total = linear(terms, {a: Fraction(1), b: Fraction(2)}, (4, 6))
    assert terms.lookup("reshape", ((2, 2, 6),), (total,)) is None
    assert not _reshape_built(terms, total, (2, 2, 6))
    viewed = terms.make("reshape", ((2, 2, 6),), (total,), (2, 2, 6))
    assert terms[viewed].op == "lin"  # distributed over the parts: no reshape term of the sum exists
    assert terms.lookup("reshape", ((2, 2, 6),), (total,)) == viewed
    assert _reshape_built(terms, total, (2, 2, 6)) and not _reshape_built(terms, total, (4, 3, 2))
