import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "src", "shardproof", "zoo")
for d in (ZOO, os.path.join(ZOO, "bugs"), os.path.join(ZOO, "train"), os.path.join(ZOO, "train", "bugs")):
    if d not in sys.path:
        sys.path.insert(0, d)

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_fix_search(request, monkeypatch):
    """The fix search (re-verifying repaired programs, up to 30 s per unfixable violation) is
    tested in tests/test_fix_suggestions.py and where a test asks for it with the
    `fix_search` marker; elsewhere a violation's verdict and location are what is tested."""
    if request.node.get_closest_marker("fix_search") is None:
        import shardproof.api
        monkeypatch.setattr(shardproof.api, "FIX_SEARCH", False)


# Mutation operators whose survivors wait for a fix (operator -> the class and defect). Tests
# pin them as strict xfails or leave them out of the no-survivor checks; empty when none is open.
MUTANTS_PENDING: dict[str, str] = {}


def assert_proved_not_confirmed(report, why: str = "too large to execute here"):
    """A proof that execution could not confirm here (e.g. a real dump too large to run on
    this machine): honestly unknown, with the proof's relations kept in the report."""
    assert report.status == "unknown", (report.status, report.reason)
    assert report.reason.startswith("proved, but not confirmed by execution") and why in report.reason, report.reason
    assert report.confirmation is not None and report.confirmation.outcome == "skipped"
