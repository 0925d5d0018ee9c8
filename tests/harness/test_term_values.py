"""The harness's term check (term_values.py): a claimed term is compared with its own value on
the drawn inputs. It found ``sub(a, b, alpha=2)`` built as ``a - b`` (lemmas.py's sub rewrite
dropped alpha), which claims compared with each other never saw: one spelling, one claim."""
import numpy as np
import pytest
import torch

from shardproof.algebra.layout import full
from shardproof.algebra.terms import TermStore
from shardproof.relations.spec import Shard

from .core import Claims, Draw, T, check_rule
from .term_values import check_terms, term_value


@pytest.mark.parametrize("alpha", [2, -1, 0.5])
def test_sub_with_alpha_is_checked(alpha):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(4, 3, dtype=torch.float64, generator=g) for _ in range(2))
    d = Draw("aten.sub", {"a": a, "b": b}, (T("a"), T("b")), {"alpha": alpha})
    assert check_rule(d, {"a": Shard(0), "b": Shard(0)}, 2) == "checked"


def test_a_claim_against_the_terms_own_value():
    terms = TermStore()
    x = terms.make("input", ("x", "f64"), (), (2, 3))
    e = terms.make("exp", ("$", ()), (x,), (2, 3))
    s = terms.make("sum", ((1,), False, None), (e,), (2,))
    value = np.arange(6.0).reshape(2, 3) / 7
    np.testing.assert_allclose(term_value(terms, s, {"x": value}, {}), np.exp(value).sum(1))
    claims = Claims(terms, 1e-9)
    claims.add(full(terms, s), np.exp(value).sum(1), "right")
    assert check_terms(claims, {"x": value}) == 1
    wrong = Claims(terms, 1e-9)
    wrong.add(full(terms, s), np.exp(value).sum(1)[::-1].copy(), "rows swapped")
    with pytest.raises(AssertionError, match="own value"):
        check_terms(wrong, {"x": value})
