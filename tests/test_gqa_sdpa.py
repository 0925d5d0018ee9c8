"""sdpa with fewer key/value heads than query heads (grouped-query attention, as torchtitan's
Llama calls it): heads split over ranks with the key/value heads each rank's queries read is
proved; a rank holding another rank's key/value heads is a violation. Labels from gloo (slow)."""
import os
import sys

import pytest

from shardproof import api

CASE = os.path.join(os.path.dirname(__file__), "cases", "gqa_sdpa.py")
sys.path.insert(0, os.path.dirname(__file__))


def _report(monkeypatch, bug=""):
    import gloo
    monkeypatch.setenv("BUG", bug)
    return api.verify_case(gloo.load_case(CASE, 2))


def test_gqa_heads_split_verifies(monkeypatch):
    report = _report(monkeypatch)
    assert report.status == "verified", (report.status, report.reason, report.findings[:1])
    assert [(o.name, o.holds) for o in report.outputs] == [("out", "Shard(1)")]


def test_swapped_kv_heads_is_a_violation(monkeypatch):
    report = _report(monkeypatch, "kv_swapped")
    assert report.status == "violation", (report.status, report.reason)
    assert "scaled_dot_product" in report.findings[0].op, report.findings[0]


@pytest.mark.slow
@pytest.mark.sweep
def test_labels_on_gloo(monkeypatch):
    import gloo
    for bug, agrees in (("", True), ("kv_swapped", False)):
        monkeypatch.setenv("BUG", bug)
        run = gloo.run_case_file(CASE, 2)
        whole = run.single["out"]
        diffs = [float((r["out"] - whole.chunk(2, 1)[i]).abs().max()) for i, r in enumerate(run.ranks)]
        assert all(d < 1e-5 for d in diffs) == agrees, (bug, diffs)
