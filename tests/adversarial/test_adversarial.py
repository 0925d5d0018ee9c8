"""The adversarial suite (issue 14): program pairs shardproof has never been tuned on, each
labelled by running it on a real gloo process group (``gloo_run.py``), never by our rules.

- every file's declared ``LABEL`` ("bug" or "ok") is what PyTorch computes (slow: forks
  one process per rank);
- shardproof never *verifies* a buggy pair and never reports a *violation* on a correct
  one. The pairs it currently gets wrong are strict xfails naming the class being fixed
  (``casts``, ``collectives``, ``relations``, ``confirm``): remove the mark when it lands.
"""
import os

import pytest

pytest.importorskip("torch", reason="the adversarial pairs are live PyTorch cases")

import torch  # noqa: E402

from gloo_run import gloo_outcome, load, pair_files  # noqa: E402
from shardproof.api import verify_case  # noqa: E402

# pair -> the defect class shardproof still gets wrong on it (a strict xfail: empty when none is open)
FAILING: dict[str, str] = {
    "cancel_big_row": "confirm: float32 digits lost within the tolerance of the output's largest magnitude",
}


def _name(path):
    return os.path.splitext(os.path.basename(path))[0]


def _params(with_xfail: bool):
    out = []
    for path in pair_files():
        name = _name(path)
        marks = [pytest.mark.xfail(strict=True, reason=FAILING[name])] if with_xfail and name in FAILING else []
        out.append(pytest.param(path, id=name, marks=marks))
    return out


def shardproof_verdict(module) -> tuple[str, str]:
    """(status, first finding or reason); a case shardproof refuses (bad input) is "error"."""
    torch.manual_seed(0)
    case = module.case(getattr(module, "WORLD", 2))
    try:
        report = verify_case(case)
    except Exception as exc:  # noqa: BLE001 - refusing a case is an answer, never a "verified"
        return "error", f"{type(exc).__name__}: {exc}"
    f = report.findings[0] if report.findings else None
    return report.status, (f"{f.kind} at {f.node} ({f.op})" if f else report.reason or "")


def test_the_suite_is_large_and_balanced():
    labels = [load(p).LABEL for p in pair_files()]
    assert len(labels) >= 80 and set(labels) == {"bug", "ok"}
    assert abs(labels.count("bug") - labels.count("ok")) <= len(labels) // 5, labels
    assert all(load(p).CLASS in ("casts", "collectives", "relations", "confirm") for p in pair_files())


@pytest.mark.slow
@pytest.mark.parametrize("path", _params(with_xfail=False))
def test_label_is_what_gloo_computes(path):
    module = load(path)
    outcome, why = gloo_outcome(module)
    assert outcome == {"bug": "differs", "ok": "equal"}[module.LABEL], why


@pytest.mark.parametrize("path", _params(with_xfail=True))
def test_shardproof_never_lies(path):
    module = load(path)
    status, why = shardproof_verdict(module)
    if module.LABEL == "bug":
        assert status != "verified", "a buggy program was verified"
        if status == "violation" and getattr(module, "BUG_OP", None):
            assert f"({module.BUG_OP})" in why, why
    else:
        assert status != "violation", f"a correct program was reported a violation: {why}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sp_token_mean", "broadcast_from_owner"])
def test_zoo_cases_added_for_the_class_operators_are_correct_on_gloo(name):
    """The zoo cases added so the fill, cast and root mutation operators apply are correct
    programs: a fact about PyTorch too."""
    from conftest import ZOO
    outcome, why = gloo_outcome(load(os.path.join(ZOO, f"{name}.py")))
    assert outcome == "equal", why
