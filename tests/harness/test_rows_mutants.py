"""Harness power: deliberately broken variants of the pick / row rules (algebra/picks.py,
algebra/lemmas_rows.py), swapped into the term store's rewrites, must make the chain harness
(:func:`test_chains_vs_torch.run_chain`, the check test_rows_vs_torch.py runs) fail; the rules
as they are must pass. Mutants: a pick one row off, the max shift subtracted with the wrong
sign, a mask dropped. The row mutant is invisible to claims compared with each other (a sum over
every row ignores the rows' order): it is caught by comparing each claimed term with its own
value on the drawn inputs (tests/harness/term_values.py)."""
import numpy as np
import pytest
import torch

from shardproof.algebra import lemmas_rows, picks
from shardproof.algebra.lemmas import linear
from shardproof.algebra.terms import REWRITES
from shardproof.relations.spec import Replicate

from . import test_chains_vs_torch as chains
from .core import T
from .test_rows_vs_torch import two_order_steps

A = "aten."
S, B, V = 3, 2, 5


def _inputs():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(S, B, V, dtype=torch.float64, generator=g)
    labels = torch.tensor([[0, 4, 2], [1, 0, 3]])  # class 0 present: the mask below is not constant
    return {"x": x, "labels": labels}


# the rows test's two orders ([s, b] and [b, s] rows, sums over every pick), then a masked pick
STEPS = two_order_steps(S, B, V) + [
    (A + "eq", lambda _: ((T("s4"), 0), {})),                                # s27 class 0 ignored
    (A + "masked_fill", lambda _: ((T("s5"), T("s27"), 0.0), {})),           # s28 masked picks
    (A + "sum", lambda _: ((T("s28"),), {}))]                                # s29


def _run():
    return chains.run_chain(_inputs(), STEPS, {"x": Replicate()}, 2)


def _swap(monkeypatch, op: str, right, wrong) -> None:
    assert right in REWRITES[op], f"{right.__name__} is no rewrite of {op}"
    monkeypatch.setitem(REWRITES, op, [wrong if r is right else r for r in REWRITES[op]])


def _row_off_by_one(terms, attrs, children, shape):
    """Picks of rearranged rows, each row given its neighbour's pick."""
    right = picks._take_along_of_rows(terms, attrs, children, shape)
    if right is None or not shape or shape[0] < 2:
        return right
    rolled = np.roll(np.arange(shape[0], dtype=np.int64), 1).tobytes()
    return terms.make("gather", (rolled,) + (None,) * (len(shape) - 1), (right,), shape)


def _shift_wrong_sign(terms, attrs, children, shape):
    """x[i, t_i] of a linear form with the parts constant along the row (the max shift) added
    with the wrong sign."""
    right = lemmas_rows._take_along_linear(terms, attrs, children, shape)
    if right is None or terms[right].op != "lin":
        return right
    term = terms[right]
    return linear(terms, {k: c if terms[k].op == "take_along" else -c for k, c in zip(term.children, term.attrs)},
                  shape)


def _mask_dropped(terms, attrs, children, shape):
    """where(mask, a, b) read as if the mask were true everywhere."""
    if attrs[0] != "$":
        return lemmas_rows._where_constant(terms, attrs, children, shape)
    true = terms.make("fill", (True,), (), terms.shape(children[0]))
    return lemmas_rows._where_constant(terms, attrs, (true,) + tuple(children[1:]), shape)


MUTANTS = {"row off by one": ("take_along", picks._take_along_of_rows, _row_off_by_one),
           "shift with the wrong sign": ("take_along", lemmas_rows._take_along_linear, _shift_wrong_sign),
           "mask dropped": ("where", lemmas_rows._where_constant, _mask_dropped)}


def test_the_rules_as_they_are_pass():
    assert _run() in ("checked", "unknown")


@pytest.mark.parametrize("name", MUTANTS)
def test_each_mutant_fails_the_harness(name, monkeypatch):
    op, right, wrong = MUTANTS[name]
    _swap(monkeypatch, op, right, wrong)
    with pytest.raises(AssertionError, match="claim"):
        _run()


def test_row_mutant_needs_the_term_values(monkeypatch):
    """Claims compared only with each other miss the pick one row off (every claim of its term
    comes from one spelling, and the sums over every row agree); the term's own value catches it."""
    op, right, wrong = MUTANTS["row off by one"]
    _swap(monkeypatch, op, right, wrong)
    monkeypatch.setattr(chains, "check_terms", lambda claims, inputs: 0)
    assert _run() in ("checked", "unknown")
