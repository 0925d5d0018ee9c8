"""Regression (issue 15): ``x.repeat_interleave(2, dim=0)`` crashed the localization with an
IndexError in ``verify.py:positions_in`` (an op's output compared with its input, another
term of another rank)."""
import numpy as np
import torch

from shardproof import Case
from shardproof.algebra.layout import Val
from shardproof.algebra.terms import TermStore
from shardproof.api import verify_case
from shardproof.engine.verify import positions_in


def _case(dim_dist: int) -> Case:
    single = lambda x: {"out": x.repeat_interleave(2, dim=0)}
    dist = lambda x: {"out": x.repeat_interleave(2, dim=dim_dist)}
    return Case(single=single, distributed=lambda rank, world: dist, inputs={"x": torch.randn(4, 3)},
                world_size=2, name="repeat_interleave", expect={"out": "Replicate()"})


def test_positions_in_another_term_is_none():
    terms = TermStore()
    a = terms.make("input", ("a",), (), (4, 3))
    b = terms.make("input", ("b",), (), (8,))
    assert positions_in(terms, Val(a, (None, None)), Val(b, (None,))) is None
    assert positions_in(terms, Val(a, (None, None)), Val(a, (np.array([1, 2]), None)))[0].tolist() == [1, 2]


def test_repeat_interleave_alone_does_not_crash():
    report = verify_case(_case(0))
    # the same repeated picks on both sides are related in place (status.positions_in): it had
    # stopped at aten.view, the repeated rows matched to their last copy
    assert report.status == "verified", report.reason
    assert [(o.name, o.holds) for o in report.outputs] == [("out", "Replicate()")]


def test_positions_of_the_same_repeated_picks_are_in_place():
    terms = TermStore()
    a = terms.make("input", ("a",), (), (4, 3))
    rows = np.repeat(np.arange(4), 2)
    assert positions_in(terms, Val(a, (rows, None)), Val(a, (rows, None))) == [None, None]
    got = positions_in(terms, Val(a, (rows, None)), Val(a, (np.array([1, 2]), None)))
    assert got is not None and rows[got[0]].tolist() == [1, 2]  # some copy of each picked row


def test_repeat_interleave_along_another_dim_is_not_verified():
    report = verify_case(_case(1))
    assert report.status != "verified"


SINGLE = lambda x: x.repeat_interleave(2, dim=0)  # noqa: E731
FORMS = {  # other spellings of the same rows: correct (torch computes the same) or not
    "expand_reshape": (lambda x: x[:, None].expand(4, 2, 3).reshape(8, 3), True),
    "index_select": (lambda x: x.index_select(0, torch.arange(4).repeat_interleave(2)), True),  # an input-free table
    "tiled": (lambda x: x.repeat(2, 1), False),  # the same rows, in another order
    "tiled_picks": (lambda x: x.index_select(0, torch.arange(4).repeat(2)), False),  # a table of the rows tiled
    "shifted_picks": (lambda x: x.index_select(0, (torch.arange(4).repeat_interleave(2) + 1) % 4), False),
}


def _form_case(form) -> Case:
    fn = FORMS[form][0]
    return Case(single=lambda x: {"out": SINGLE(x)}, distributed=lambda rank, world: (lambda x: {"out": fn(x)}),
                inputs={"x": torch.randn(4, 3)}, world_size=2, name=form, expect={"out": "Replicate()"})


def test_other_spellings_of_repeated_rows():
    """The in-place rule for identical repeated picks may not lie: a correct-but-odd spelling
    (expand + reshape, an index_select by an input-free table of repeated rows, its values
    computed exactly) is proved; the same rows tiled or shifted by one pick (through the same
    kind of table) are violations. Each label is torch's own answer on the values."""
    x = torch.randn(4, 3)
    for form, (fn, correct) in FORMS.items():
        assert torch.equal(fn(x), SINGLE(x)) == correct, form  # the label
        status = verify_case(_form_case(form)).status
        assert status == ("verified" if correct else "violation"), (form, status)
