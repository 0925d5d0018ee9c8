"""The terminal report, byte for byte: snapshots of a verified and a violating case (fixed
width, no colour, timings normalized) in tests/snapshots/. After an intended change, update
them with ``SHARDPROOF_UPDATE_SNAPSHOTS=1 pytest tests/test_terminal_output.py`` and review
the diff. Also: progress shows on a terminal and never off one."""
import io
import json
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console

from conftest import ROOT
from shardproof.report.progress import progress_bar
from shardproof.report.terminal import render

SNAPSHOTS = os.path.join(ROOT, "tests", "snapshots")
WIDTH = 100


def _terminal_text(report) -> str:
    out = io.StringIO()
    render(report, Console(file=out, width=WIDTH, color_system=None, force_terminal=False, highlight=False))
    text = re.sub(r"\[\d+\.\d+ s( \(proof )?(\d+\.\d+ s\))?([,\]])",
                  lambda m: "[<seconds> s" + (" (proof <seconds> s)" if m.group(1) else "") + m.group(3), out.getvalue())
    return text.replace(ROOT + os.sep, "")


def _check_snapshot(name: str, text: str) -> None:
    path = os.path.join(SNAPSHOTS, name)
    if os.environ.get("SHARDPROOF_UPDATE_SNAPSHOTS") == "1":
        os.makedirs(SNAPSHOTS, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    if not os.path.exists(path):
        pytest.fail(f"no snapshot {path}: create it with SHARDPROOF_UPDATE_SNAPSHOTS=1")
    with open(path) as f:
        assert text == f.read(), f"terminal output changed; if intended, SHARDPROOF_UPDATE_SNAPSHOTS=1 updates {path}"


@pytest.mark.fix_search
@pytest.mark.parametrize("case,snapshot", [("tp_mlp", "tp_mlp_verified.txt"),
                                           ("missing_allreduce", "missing_allreduce_violation.txt")])
def test_terminal_report_snapshot(case, snapshot, monkeypatch):
    pytest.importorskip("torch", reason="live capture needs the torch extra")
    import importlib
    from shardproof.api import verify_case
    monkeypatch.chdir(ROOT)  # source locations are printed relative to the working directory
    report = verify_case(importlib.import_module(case).case(2), 2)
    _check_snapshot(snapshot, _terminal_text(report))


def test_progress_bar_shows_the_stage_on_a_terminal():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with progress_bar(console) as progress:
        progress("capturing rank 1 of 4", 2, 9)
        console.file.flush()
    assert "capturing rank 1 of 4" in out.getvalue() and "2/9" in out.getvalue()


def test_no_progress_off_a_terminal():
    with progress_bar(Console(file=io.StringIO(), force_terminal=False)) as progress:
        assert progress is None
    with progress_bar(Console(file=io.StringIO(), force_terminal=True), enabled=False) as progress:
        assert progress is None


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), TERM="xterm-256color")
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "shardproof.cli", "verify", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


def test_piped_output_is_clean():
    pytest.importorskip("torch", reason="live capture needs the torch extra")
    done = _cli("src/shardproof/zoo/bugs/missing_allreduce.py")
    assert done.returncode == 1 and done.stderr == ""
    assert done.stdout.startswith("VIOLATION  missing_allreduce") and "\x1b" not in done.stdout
    assert "capturing" not in done.stdout and "\r" not in done.stdout
    done = _cli("src/shardproof/zoo/tp_mlp.py", "--json", "-")
    assert done.returncode == 0 and done.stderr == ""
    assert json.loads(done.stdout)["status"] == "verified"
