"""shardproof.testing: load a case file by path, assert a verdict; a failure's message is
the rendered terminal report (plain text), and a Report's repr is one short line."""
import os

import pytest

from conftest import ZOO

pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof import Case  # noqa: E402
from shardproof.testing import assert_verified, assert_violation, load_case, rendered  # noqa: E402

TP_MLP = os.path.join(ZOO, "tp_mlp.py")
BUG = os.path.join(ZOO, "bugs", "missing_allreduce.py")


def test_load_case_by_path_and_world_size():
    case = load_case(TP_MLP, world_size=4)
    assert isinstance(case, Case) and case.world_size == 4
    assert load_case(TP_MLP).world_size == 2


def test_load_case_errors_are_plain():
    with pytest.raises(ValueError, match="does not exist"):
        load_case(os.path.join(ZOO, "no_such_case.py"))


def test_assert_verified_returns_the_report():
    report = assert_verified(TP_MLP, world_size=2)
    assert report.status == "verified" and report.world_size == 2
    assert report.confirmation.outcome == "confirmed"


def test_assert_violation_at_node_op_and_line():
    meta = load_case(BUG).meta
    with open(BUG) as f:  # the line the BUG comment marks
        line = "missing_allreduce.py:" + str(next(i for i, text in enumerate(f, 1) if "# BUG" in text))
    report = assert_violation(BUG, world_size=2, at=line, kind=meta["bug"], ranks=[0, 1])
    f = report.findings[0]
    assert (f.node, f.op) == (meta["bug_node"], meta["bug_op"])
    assert_violation(load_case(BUG), 2, at=f.node)
    assert_violation(BUG, 2, at=f.op, confirm_draws=0)


def test_failure_message_is_the_rendered_report():
    with pytest.raises(AssertionError) as info:
        assert_verified(BUG, world_size=2)
    message = str(info.value)
    assert message.startswith("expected verified, got violation")
    assert "VIOLATION" in message and "finding 1" in message and "missing_allreduce.py:" in message
    assert "\x1b[" not in message, "plain text: no terminal colour codes"
    assert "Finding(" not in message and "Report(" not in message, "not a dataclass repr"


def test_wrong_location_kind_or_ranks_fail_with_the_report():
    for options, said in [({"at": "no_such_node"}, "expected the first finding at 'no_such_node'"),
                          ({"kind": "wrong-reduce-op"}, "expected a 'wrong-reduce-op' finding"),
                          ({"ranks": [0]}, "expected the finding on ranks [0]")]:
        with pytest.raises(AssertionError, match="VIOLATION") as info:
            assert_violation(BUG, 2, confirm_draws=0, **options)
        assert str(info.value).startswith(said), str(info.value)[:200]


def test_assert_violation_on_a_correct_case_fails():
    with pytest.raises(AssertionError) as info:
        assert_violation(TP_MLP, 2)
    assert str(info.value).startswith("expected a violation, got verified")
    assert "VERIFIED" in str(info.value)


def test_report_repr_is_short():
    report = assert_violation(BUG, 2, confirm_draws=0)
    text = repr(report)
    f = report.findings[0]
    assert text.startswith("Report(violation,") and "world size 2" in text
    assert f.kind in text and f.node in text and len(text) < 400, text
    assert "Finding(" not in text
    assert len(rendered(report)) > len(text)


def test_pytest_plugin_collects_case_files(tmp_path):
    """``pytest --shardproof`` runs each case file as a test: a correct case passes, a bug
    case passes as the violation its meta states, and a failure shows the rendered report."""
    import subprocess
    import sys
    from conftest import ROOT
    (tmp_path / "cases").mkdir()
    wrong = tmp_path / "cases" / "claims_verified.py"  # a bug case that claims to be correct (found in a directory)
    wrong.write_text(f"import sys\nsys.path.insert(0, {os.path.dirname(BUG)!r})\n"
                     "from missing_allreduce import case as _case\n\n\ndef case(world_size=2):\n"
                     "    c = _case(world_size)\n    c.meta = {}\n    return c\n")
    # the plugin by name, entry points off: an installed package registers it (pytest11) and
    # `-p` would register it twice; a checkout run from src/ has no entry point
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "shardproof.pytest_plugin", "--shardproof",
                           "-p", "no:cacheprovider", TP_MLP, BUG, str(tmp_path / "cases")], capture_output=True, text=True,
                          cwd=str(tmp_path), env=env, timeout=600)
    out = done.stdout
    assert done.returncode == 1 and "2 passed" in out and "1 failed" in out, out[-3000:]
    assert "expected verified, got violation" in out and "VIOLATION" in out and "finding 1" in out
