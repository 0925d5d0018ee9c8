"""Two forms real context/sequence-parallel code produces (issue 18, the 4-D step):
- a non-contiguous sequence shard through a linear: torch multiplies it as a batched product
  with the weight broadcast, the single device folds rows (view, mm, view); both are one
  contraction (algebra/normal.py ``_unfolded_product``, ops/pairing.py: a size-1 operand dim is
  a broadcast, not a grouping; layout.select of a size-1 dim drops it);
- partial sums over a grid of blocks (batch row x sequence half per rank) complete dim by dim
  (algebra/ranks.py ``_complete_by_dims``).
Each correct program is proved, each buggy twin is a violation; labels from real gloo runs."""
import os

import pytest

from conftest import ROOT
from gloo import max_differences, run_case_file
from shardproof.api import verify_case
from shardproof.testing import load_case

CASES = os.path.join(ROOT, "tests", "cases", "grid")


def verdict(name: str, world: int, bug: bool, monkeypatch, odd: bool = False):
    monkeypatch.setenv("BUG", "1" if bug else "0")
    monkeypatch.setenv("ODD", "1" if odd else "0")
    case = load_case(os.path.join(CASES, name + ".py"), world)
    return verify_case(case, world, fixes=False)


@pytest.mark.parametrize("odd", [False, True])
@pytest.mark.parametrize("name,world", [("sequence_matmul", 2), ("sequence_matmul", 4), ("batch_sequence_grid", 4)])
def test_correct_forms_are_proved(name, world, odd, monkeypatch):
    """Also when written oddly (ODD=1: a contiguous copy folded into rows, a column-major grid)."""
    report = verdict(name, world, False, monkeypatch, odd)
    assert report.status == "verified", report.reason


@pytest.mark.parametrize("name,world", [("sequence_matmul", 2), ("batch_sequence_grid", 4)])
def test_buggy_twins_are_violations(name, world, monkeypatch):
    report = verdict(name, world, True, monkeypatch)
    assert report.status == "violation", report.reason


@pytest.mark.slow
@pytest.mark.parametrize("name,world", [("sequence_matmul", 2), ("batch_sequence_grid", 4)])
def test_labels_on_gloo(name, world, monkeypatch):
    path = os.path.join(CASES, name + ".py")

    def relative_difference(bug: str, odd: str = "0") -> float:
        monkeypatch.setenv("BUG", bug)
        monkeypatch.setenv("ODD", odd)
        run = run_case_file(path, world)
        return max_differences(run)["out"] / float(run.single["out"].abs().max())
    assert relative_difference("0") < 1e-5 and relative_difference("0", "1") < 1e-5
    assert relative_difference("1") > 1e-2
