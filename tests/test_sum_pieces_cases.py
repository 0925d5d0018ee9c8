"""Complementary partial sums through one linear map, completed after an all_to_all
(tests/cases/sum_pieces/rope_pieces.py, cp 4: 2 groups of 4 query heads, each rank summing its
2 heads, multiplying by the table, trading sequence chunks, summing the replicas of each group):
verified; its adversarial twins are never verified -- another rank's table (a violation at the
roll, odd ranks), a partial summed twice and replicas of two groups summed together (violations
on every rank). Labels: each program run on a real gloo group against the single device
(sweep: the correct one agrees, each twin differs)."""
import os

import pytest

from conftest import ROOT

pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import load_case, max_differences, run_case_file  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402

CASES = os.path.join(ROOT, "tests", "cases", "sum_pieces")
TWINS = ("other_table", "summed_twice", "wrong_subgroup")


def _path(twin: str = "") -> str:
    return os.path.join(CASES, "rope_pieces" + (f"_{twin}" if twin else "") + ".py")


def _report(path: str):
    return verify_prepared(prepare(load_case(path, 4), 4), fixes=False)


def test_pieces_through_one_map_verified():
    report = _report(_path())
    assert report.status == "verified", report.reason
    assert [o.holds for o in report.outputs] == ["Replicate()"], report.outputs


@pytest.mark.parametrize("twin", TWINS)
def test_twins_are_violations(twin):
    report = _report(_path(twin))
    assert report.status == "violation", report.reason
    f = report.findings[0]
    if twin == "other_table":  # the wrong table is where the odd ranks part from the others
        assert (f.op, sorted(f.rank)) == ("aten.roll", [1, 3]), f
    else:  # every rank's sum holds other replicas than its group's (found at the replicas' view)
        assert sorted(f.rank) == [0, 1, 2, 3] and f.op in ("aten.view", "aten.sum"), f


@pytest.mark.sweep
@pytest.mark.parametrize("twin", ("",) + TWINS)
def test_labels_on_gloo(twin):
    worst = max(max_differences(run_case_file(_path(twin), 4, timeout=300)).values())
    assert (worst <= 1e-5) if not twin else (1e-3 < worst < float("inf")), worst
