import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "src", "shardproof", "zoo")
for d in (ZOO, os.path.join(ZOO, "bugs"), os.path.join(ZOO, "train"), os.path.join(ZOO, "train", "bugs"),
          os.path.join(ZOO, "cp"), os.path.join(ZOO, "cp", "bugs")):
    if d not in sys.path:
        sys.path.insert(0, d)

import pytest  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):  # one pytest worker per core (make test): one torch thread each
    import torch
    torch.set_num_threads(1)


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


# Every report the tests produce follows the JSON Schema (src/shardproof/report/report.schema.json):
# each Report made during a test is validated at its end, and every to_json() call as it is made.
import json  # noqa: E402

import jsonschema  # noqa: E402
import pytest  # noqa: E402

from shardproof.engine.result import Report  # noqa: E402

SCHEMA_PATH = os.path.join(ROOT, "src", "shardproof", "report", "report.schema.json")
with open(SCHEMA_PATH, encoding="utf-8") as _f:
    REPORT_SCHEMA = json.load(_f)
REPORT_VALIDATOR = jsonschema.Draft202012Validator(REPORT_SCHEMA)


def validate_report_json(data) -> None:
    """`data` (a report's or an error's JSON, as the CLI writes it) follows the schema."""
    doc = json.loads(json.dumps(data, default=str))
    if REPORT_VALIDATOR.is_valid(doc):
        return
    branch = "error" if isinstance(doc, dict) and doc.get("status") == "error" else "report"  # its own errors
    errors = sorted(REPORT_VALIDATOR.evolve(schema={"$defs": REPORT_SCHEMA["$defs"], "$ref": f"#/$defs/{branch}"})
                    .iter_errors(doc), key=lambda e: list(e.absolute_path)) or list(REPORT_VALIDATOR.iter_errors(doc))
    if errors:
        raise AssertionError("report JSON does not follow report.schema.json: " + "; ".join(
            f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}" for e in errors[:5]))


_made: list = []


@pytest.fixture(autouse=True)
def _reports_follow_the_schema(monkeypatch):
    init, to_json = Report.__init__, Report.to_json

    def tracked_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _made.append(self)

    def validated_to_json(self):
        data = to_json(self)
        validate_report_json(data)
        return data
    monkeypatch.setattr(Report, "__init__", tracked_init)
    monkeypatch.setattr(Report, "to_json", validated_to_json)
    _made.clear()
    yield
    made, _made[:] = list(_made), []
    for report in made:
        validate_report_json(to_json(report))


def check_hint(finding, meta: dict) -> None:
    """A zoo bug's first finding has a hint right for that bug (``meta["hint"]``, a regex it must
    match; ``meta["hint_not"]``, one it must not) and sits on the bug's source line (the line
    holds ``meta["bug_line"]``, by default the ``BUG`` marker)."""
    import linecache
    import re
    assert "hint" in meta, "the bug's meta must state what a right hint mentions (meta['hint'])"
    assert re.search(meta["hint"], finding.hint, re.I | re.S), (finding.kind, finding.hint)
    if "hint_not" in meta:
        assert not re.search(meta["hint_not"], finding.hint, re.I | re.S), finding.hint
    assert finding.source, "the finding must carry the user's source line"
    file, line = finding.source.split(" in ")[0].rsplit(":", 1)
    text = linecache.getline(os.path.join(ROOT, file) if not os.path.isabs(file) else file, int(line)).strip()
    assert meta.get("bug_line", "BUG") in text, (finding.source, text)
