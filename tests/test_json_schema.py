"""The JSON report's schema (src/shardproof/report/report.schema.json): packaged, itself a
valid JSON Schema that describes every field, accepted by the reports of zoo bugs and
correct cases (forward and training), by the CLI's error object, and enforced on every
report the tests produce (tests/conftest.py)."""
import importlib.resources
import json
import os

import jsonschema
import pytest

from conftest import REPORT_SCHEMA, SCHEMA_PATH, ZOO, validate_report_json
from shardproof.engine.result import SCHEMA_VERSION, Finding, Report


def test_schema_is_packaged_and_valid():
    packaged = importlib.resources.files("shardproof.report") / "report.schema.json"
    assert json.loads(packaged.read_text(encoding="utf-8")) == REPORT_SCHEMA
    jsonschema.Draft202012Validator.check_schema(REPORT_SCHEMA)
    assert REPORT_SCHEMA["$defs"]["schema_version"]["const"] == SCHEMA_VERSION
    with open(os.path.join(os.path.dirname(SCHEMA_PATH), "..", "..", "..", "pyproject.toml")) as f:
        assert "report.schema.json" in f.read(), "package data: the schema is installed with the package"


def _properties(node, path=""):
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            yield f"{path}/{name}", sub
        for key, sub in node.items():
            yield from _properties(sub, f"{path}/{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _properties(sub, f"{path}[{i}]")


def test_every_field_is_described():
    defs = REPORT_SCHEMA["$defs"]
    undescribed = [p for p, sub in _properties(REPORT_SCHEMA) if "description" not in sub
                   and "description" not in defs.get(sub.get("$ref", "").rsplit("/", 1)[-1], {})
                   and "/display/" not in p]  # the display strings: described once, on display
    assert undescribed == []
    # every field Report.to_json writes is in the schema (closed objects: additionalProperties false)
    keys = set(Report("verified", 2).to_json())
    assert keys | {"case"} == set(defs["report"]["properties"])  # "case": a summary's runs only
    assert set(Finding("k", [0], "n", "op", None, "e", "a", "m").__dataclass_fields__) == \
        set(defs["finding"]["required"])


def test_error_object_is_accepted():
    error = {"schema_version": SCHEMA_VERSION, "status": "error", "message": "case file x.py does not exist",
             "exit_code": 3}
    validate_report_json(error)
    for broken in ({k: v for k, v in error.items() if k != "exit_code"}, {**error, "status": "verified"},
                   {**error, "schema_version": "0"}):
        with pytest.raises(AssertionError, match="does not follow"):
            validate_report_json(broken)


def test_a_malformed_report_is_rejected():
    bad = Report("verified", 2).to_json()
    bad["status"] = "fine"
    with pytest.raises(AssertionError, match="status"):
        validate_report_json(bad)
    with pytest.raises(AssertionError, match="schema_version"):
        validate_report_json({k: v for k, v in Report("unknown", 2).to_json().items() if k != "schema_version"})


def test_reports_made_in_a_test_are_checked_at_its_end():
    """The autouse hook tracks every Report made during a test (validated at teardown)."""
    from conftest import _made
    before = len(_made)
    Report("unknown", 2, reason="tracked")
    assert len(_made) == before + 1 and _made[-1].reason == "tracked"


torch = pytest.importorskip("torch", reason="live capture needs the torch extra")


@pytest.mark.parametrize("path,world,status", [
    ("tp_mlp.py", 2, "verified"),
    ("bugs/missing_allreduce.py", 2, "violation"),
    ("bugs/wrong_slice_offset.py", 2, "violation"),
    ("bugs/unknown_op.py", 2, "unknown"),
    ("train/tp_mlp_train.py", 2, "verified"),
    ("train/bugs/loss_mean_per_microbatch.py", None, "violation"),
])
def test_zoo_reports_follow_the_schema(path, world, status):
    from shardproof.testing import check, load_case
    case = load_case(os.path.join(ZOO, path), world)
    report, _ = check(case, world)
    assert report.status == status, repr(report)  # the zoo's meta is checked in test_zoo / test_training
    data = report.to_json()  # validated by the hook as it is made
    validate_report_json(data)
    assert data["schema_version"] == SCHEMA_VERSION
    if status == "verified":
        assert data["confirmation"]["outcome"] == "confirmed"
    for f in data["findings"]:
        cex = f["counterexample"]
        if cex is None:
            continue
        flat = json.dumps([cex["single_device"], cex["distributed"], list(cex.get("inputs", {}).values())])
        assert '"' not in flat, "counterexample values are numbers, not pre-formatted strings"
        assert isinstance(cex["display"]["single_device"], str)


def test_cli_json_has_schema_version_and_numbers(tmp_path, capsys):
    from shardproof.cli import main
    out = tmp_path / "r.json"
    code = main(["verify", os.path.join(ZOO, "bugs", "missing_allreduce.py"), "--json", str(out)])
    assert code == 1
    data = json.loads(out.read_text())
    validate_report_json(data)
    assert data["schema_version"] == SCHEMA_VERSION
    cex = data["findings"][0]["counterexample"]
    assert all(isinstance(x, (int, float)) for row in cex["single_device"] for x in row)
    text = capsys.readouterr().out
    assert cex["display"]["single_device"].splitlines()[0] in text, "the terminal prints the display strings"
