"""The bundled model zoo: every correct model is verified (a proof) at each of its world
sizes and agrees numerically on random inputs; every bug is a violation whose first
finding names the injected node, op and ranks and the bug class its ``meta`` states; an
unknown op gives unknown, never verified."""
import importlib
import os

import pytest

from conftest import ZOO, check_hint

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import prepare, run_zoo_case, verify_prepared  # noqa: E402
from shardproof.testing import assert_verified, assert_violation  # noqa: E402
from shardproof.zoo import catalogue, entry_name  # noqa: E402

FAST_WORLDS = (2, 4)


def _cases(folder):
    """(module, world size) for each case file directly in `folder`, at each of its WORLD_SIZES."""
    out = []
    for path in catalogue(folder):
        if os.path.dirname(path) != folder:
            continue
        name = os.path.splitext(os.path.basename(path))[0]
        module = importlib.import_module(name)
        for w in getattr(module, "WORLD_SIZES", (2,)):
            marks = () if w in FAST_WORLDS else (pytest.mark.slow,)
            out.append(pytest.param(module, w, id=f"{name}-tp{w}", marks=marks))
    return out


@pytest.mark.parametrize("module,world", _cases(ZOO))
def test_model_verified(module, world):
    """A proof, confirmed by execution, and numerically equal on random inputs."""
    report = assert_verified(module.case(world), world, cross_check=True)
    assert report.temporal["checked"] and report.temporal["findings"] == 0, report.temporal  # issue 18: no hazard


BUGS = [c for c in _cases(os.path.join(ZOO, "bugs")) if "unknown_op" not in c.values[0].__name__]


@pytest.mark.parametrize("module,world", BUGS)
def test_bug_found(module, world):
    case = module.case(world)
    if case.meta.get("pending"):
        pytest.skip(f"pending: needs {case.meta['pending']}")
    meta = case.meta
    want_ranks = list(range(world)) if meta["bug_ranks"] == "all" else list(meta["bug_ranks"])
    # cross_check: a violation must be backed by a numeric difference
    report = assert_violation(case, world, at=(meta["bug_node"], meta["bug_op"]), kind=meta["bug"], ranks=want_ranks,
                              cross_check=True)
    finding = report.findings[0]
    assert (finding.node, finding.op) == (meta["bug_node"], meta["bug_op"]), finding
    check_hint(finding, meta)


def test_unknown_op_is_unknown_not_verified():
    module = importlib.import_module("unknown_op")
    case = module.case(2)
    report = verify_prepared(prepare(case, 2))
    assert report.status == "unknown"
    assert case.meta["unknown_op"] in report.reason


TRAIN_SAMPLE = {"train/tp_mlp_train", "train/bugs/loss_mean_per_microbatch"}  # the other training cases:
# tests/test_training.py runs each against the same meta (running them twice would double make test)


@pytest.mark.slow
def test_zoo_command_judges_every_case_against_its_meta():
    """`shardproof zoo` runs the catalogue: every case as its meta expects, bugs located,
    pending ones listed with the feature they need (training cases: a sample, see above)."""
    cases = [(entry_name(p), importlib.import_module(os.path.splitext(os.path.basename(p))[0]).case())
             for p in catalogue(ZOO)]
    assert all(case.meta.get("source") for _, case in cases), "every zoo case names its source"
    results = [run_zoo_case(case, name) for name, case in cases
               if not name.startswith("train/") or name in TRAIN_SAMPLE or case.meta.get("pending")]
    assert [r.name for r in results if not r.ok] == []
    assert {r.name for r in results} >= TRAIN_SAMPLE
    bugs = [r for r in results if r.expected.verdict == "violation"]
    assert len(bugs) >= 25 and all(r.located for r in bugs)
    # pending cases are listed, not run, each naming the feature it waits for (none is pending
    # since the pipeline work; the pending path on its own: test_zoo_pending_case_listed_not_run)
    pending = [r for r in results if r.expected.verdict == "pending"]
    assert {r.name for r in pending} == {name for name, case in cases if case.meta.get("pending")}
    assert all("needs" in r.expected.detail and not r.verdict and not r.seconds for r in pending)


def test_zoo_pending_case_listed_not_run():
    """A case whose meta says it is pending is not run: it counts as expected and the zoo
    summary names the feature it needs."""
    import dataclasses

    from rich.console import Console

    from shardproof.report.zoo import render_zoo, zoo_json
    case = importlib.import_module("tp_mlp").case(2)
    result = run_zoo_case(dataclasses.replace(case, meta={**case.meta, "pending": "a rule for X"}), "tp_mlp")
    assert (result.expected.verdict, result.verdict, result.seconds, result.ok) == ("pending", "", 0.0, True)
    console = Console(record=True, width=200)
    render_zoo([result], console)
    text = console.export_text()
    assert "tp_mlp: pending: needs a rule for X" in text and "1 of 1 cases as expected" in text
    assert zoo_json([result])["cases"][0]["expected"] == "pending"
