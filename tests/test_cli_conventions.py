"""CLI conventions and bad input (issue 17): --version, python -m, -q, NO_COLOR, exit 4,
budgets, several cases and sweeps, arguments validated before capture, one-paragraph
errors with the user's file:line, the --json - error object, the whole run's time.

Most runs call ``cli.main`` in-process (the zoo's siblings are importable through
conftest); the smallest zoo cases, tp_mlp (verified, gloo-labelled in the zoo) and
bugs/missing_allreduce (a violation, gloo-labelled in the zoo), without confirmation
where confirmation is not the point."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, ZOO, validate_report_json
from shardproof import __version__, cli
from shardproof.api import confirm, prepare, verify_prepared
from shardproof.engine.budget import BudgetExceeded, budget


@pytest.fixture(autouse=True)
def _own_sys_path(monkeypatch):
    """The CLI puts a case file's folder on sys.path; a copy of a zoo file in tmp_path must not
    shadow the zoo module for the tests that run after this one."""
    monkeypatch.setattr(sys, "path", list(sys.path))

TP_MLP = os.path.join(ZOO, "tp_mlp.py")
MISSING = os.path.join(ZOO, "bugs", "missing_allreduce.py")
ENV = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _valid(data):
    """Every JSON document the CLI writes (report, summary, error object) follows report.schema.json."""
    validate_report_json(data)
    return data


def run_module(*args, env=None):
    return subprocess.run([sys.executable, "-m", "shardproof", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env or ENV)


def main(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_paragraph(err: str) -> str:
    assert "Traceback" not in err, err
    assert err.startswith("shardproof: error: "), err
    return " ".join(err.split())


def write(path, text):
    path.write_text(text)
    return str(path)


TINY = """\
import torch
from shardproof import Case


def case(world_size=2):
    open({marker!r}, "w").close()
    return Case(single=lambda x: x * 2, distributed=lambda rank, world: (lambda x: x * 2),
                inputs={{"x": torch.randn(4)}}, world_size=world_size)
"""


# ------------------------------------------------------------------ conventions

def test_version_and_python_m():
    p = run_module("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"shardproof {__version__}", p.stdout + p.stderr
    assert __version__ and __version__[0].isdigit()


def test_quiet_prints_the_verdict_line_only(capsys):
    code, out, _ = main(capsys, "verify", TP_MLP, "--no-confirm", "-q")
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("UNKNOWN  tp_mlp at world size 2"), out
    code, out, err = main(capsys, "verify", MISSING, "--no-confirm", "-qq")
    assert code == 1 and out == "" and err == ""


def test_no_color_is_kept():
    env = {**ENV, "FORCE_COLOR": "1"}
    coloured = run_module("verify", TP_MLP, "--no-confirm", "-q", env=env)
    plain = run_module("verify", TP_MLP, "--no-confirm", "-q", env={**env, "NO_COLOR": "1"})
    assert "\x1b[1;33m" in coloured.stdout and "\x1b[1;33m" not in plain.stdout and "UNKNOWN" in plain.stdout


def test_internal_error_exit_4(tmp_path):
    plugin = write(tmp_path / "boom.py", "import shardproof.api\n\n"
                                         "def broken(*a, **k):\n    raise RuntimeError('boom inside shardproof')\n\n"
                                         "shardproof.api.verify_case = broken\n")
    p = run_module("verify", TP_MLP, "--plugin", plugin)
    assert p.returncode == 4, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "please report" in p.stderr and "boom inside shardproof" in p.stderr
    assert "SHARDPROOF_DEBUG=1" in p.stderr
    p = run_module("verify", TP_MLP, "--plugin", plugin, "--json", "-", env={**ENV, "SHARDPROOF_DEBUG": "1"})
    assert p.returncode == 4 and "Traceback" in p.stderr and "please report" in p.stderr
    assert _valid(json.loads(p.stdout)) == {"schema_version": "1", "status": "error", "exit_code": 4,
                                    "message": "internal error: RuntimeError: boom inside shardproof"}


def test_help_epilog_documents_exit_codes_and_conventions():
    p = run_module("verify", "--help")
    text = " ".join(p.stdout.split())
    assert p.returncode == 0
    for words in ("4 internal error", "0 < 2 < 1 < 3 < 4", "-n 1 is allowed", "NO_COLOR", "--timeout", "-n 2,4,8"):
        assert words in text, words
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "| 4 |" in readme and "SHARDPROOF_DEBUG=1" in readme


def test_header_time_is_the_whole_run(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    code, out, _ = main(capsys, "verify", TP_MLP, "--no-confirm", "--json", str(out_json))
    stats = _valid(json.loads(out_json.read_text()))["stats"]
    assert stats["wall_seconds"] > stats["seconds"] > 0  # capture + proof > proof alone
    assert f"[{stats['wall_seconds']:.2f} s (proof {stats['seconds']:.2f} s)" in out


# ------------------------------------------------------------------ budgets

def test_timeout_gives_unknown_naming_the_stage(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    code, out, err = main(capsys, "verify", TP_MLP, "--timeout", "0.001", "--json", str(out_json))
    report = _valid(json.loads(out_json.read_text()))
    assert code == 2 and report["status"] == "unknown" and "Traceback" not in err
    assert report["reason"].startswith("stopped: the time budget (0.001 s, --timeout) ran out while capturing")


def test_budget_names_the_interpreted_node():
    from tp_mlp import case
    p = prepare(case())
    with budget(seconds=0):
        with pytest.raises(BudgetExceeded, match=r"ran out while starting, at node fc1\.weight \(input\) of the "
                                                 r"single-device program"):
            verify_prepared(p, confirm_draws=-1)
    report = verify_prepared(p, confirm_draws=-1)  # outside the block: no budget
    assert report.status == "unknown" and report.reason.startswith("proved, but not confirmed")
    report.status, report.reason = "verified", ""
    with budget(seconds=0), pytest.raises(BudgetExceeded, match="ran out while confirming the proof by execution$"):
        confirm(p, report)  # checked before the programs are run


def test_max_memory_gives_unknown(capsys):
    code, out, err = main(capsys, "verify", TP_MLP, "--max-memory", "1M")
    text = " ".join(out.split())
    assert code == 2 and "UNKNOWN" in text and "the memory budget (1 MiB, --max-memory) was exceeded" in text
    code, _, err = main(capsys, "verify", TP_MLP, "--max-memory", "lots")
    assert code == 3 and "expected a size such as 2G" in one_paragraph(err)
    code, _, err = main(capsys, "verify", TP_MLP, "--timeout", "0")
    assert code == 3 and "positive number of seconds" in one_paragraph(err)


# ------------------------------------------------------------------ several runs

def test_directory_of_cases_summary_and_worst_exit(tmp_path, capsys):
    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(TP_MLP, cases / "tp_mlp.py")
    shutil.copy(MISSING, cases / "missing_allreduce.py")
    (cases / "helper.py").write_text("X = 1\n")  # no case(): not a case file
    out_json = tmp_path / "all.json"
    code, out, err = main(capsys, "verify", str(cases), "--no-confirm", "-q", "--json", str(out_json))
    data = _valid(json.loads(out_json.read_text()))
    assert code == 1 and data["exit_code"] == 1, out + err  # violation (1) is worse than unknown (2)
    assert [(os.path.basename(r["case"]), r["status"]) for r in data["runs"]] == \
        [("missing_allreduce.py", "violation"), ("tp_mlp.py", "unknown")]
    assert data["schema_version"] == "1"
    assert data["runs"][0]["findings"][0]["kind"] == "partial-sum-never-reduced"
    assert "summary" in out and "VIOLATION" in out and "2 runs; exit code 1" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = main(capsys, "verify", str(empty))
    assert code == 3 and "holds no case files" in one_paragraph(err)


def test_world_size_sweep(tmp_path, capsys):
    out_json = tmp_path / "sweep.json"
    code, out, _ = main(capsys, "verify", TP_MLP, "-n", "2,4", "--no-confirm", "-q", "--json", str(out_json))
    data = _valid(json.loads(out_json.read_text()))
    assert code == 2 and [(r["world_size"], r["status"]) for r in data["runs"]] == [(2, "unknown"), (4, "unknown")]
    code, _, err = main(capsys, "verify", TP_MLP, "-n", "2,4", "--html", str(tmp_path / "x.html"))
    assert code == 3 and "--html draws one run" in one_paragraph(err)


def test_one_bad_case_among_several_is_counted(tmp_path, capsys):
    bad = write(tmp_path / "returns_none.py", "def case(world_size=2):\n    return None\n")
    code, out, err = main(capsys, "verify", TP_MLP, bad, "--no-confirm", "-q")
    assert code == 3 and "returned NoneType (None)" in one_paragraph(err) and "ERROR" in out and "UNKNOWN" in out


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("n, words", [("0", "must be at least 1"), ("-1", "must be at least 1"),
                                      ("1000", "WORLD_SIZES = (2, 3, 4, 6, 8)"), ("5", "pick one of them")])
def test_bad_world_sizes_exit_3(capsys, n, words):
    code, _, err = main(capsys, "verify", TP_MLP, "-n", n)
    assert code == 3 and words in one_paragraph(err)


def test_world_size_bounded_without_declared_sizes(tmp_path, capsys):
    marker = tmp_path / "called"
    path = write(tmp_path / "tiny.py", TINY.format(marker=str(marker)))
    code, _, err = main(capsys, "verify", path, "-n", "1025")
    assert code == 3 and "at most 1024 ranks" in one_paragraph(err) and not marker.exists()
    with pytest.raises(SystemExit) as exit_:  # argparse's own usage error, exit 3
        cli.main(["verify", path, "-n", "two"])
    assert exit_.value.code == 3 and "expected a number of ranks" in capsys.readouterr().err
    code, _, err = main(capsys, "mutants", path, "-n", "0")
    assert code == 3 and "must be at least 1" in one_paragraph(err) and not marker.exists()


def test_world_size_one_says_nothing_about_sharding_was_proved(tmp_path, capsys):
    out_json = tmp_path / "one.json"
    code, out, _ = main(capsys, "verify", TP_MLP, "-n", "1", "--no-confirm", "--json", str(out_json))
    report = _valid(json.loads(out_json.read_text()))
    assert report["world_size"] == 1 and report["reason"].startswith("world size 1: ")
    assert "nothing about sharding or communication was proved" in " ".join(out.split())


@pytest.mark.parametrize("option", ["--json", "--html"])
def test_unwritable_output_exit_3_before_any_work(tmp_path, capsys, option):
    marker = tmp_path / "called"
    path = write(tmp_path / "tiny.py", TINY.format(marker=str(marker)))
    for target, words in ((tmp_path / "no" / "such" / "dir" / "out", "does not exist"),
                          (tmp_path, "is a directory")):
        code, _, err = main(capsys, "verify", path, option, str(target))
        assert code == 3 and words in one_paragraph(err) and not marker.exists()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not os.access(locked, os.W_OK):  # (root may write anywhere)
            code, _, err = main(capsys, "verify", path, option, str(locked / "out"))
            assert code == 3 and "permission denied" in one_paragraph(err) and not marker.exists()
    finally:
        locked.chmod(0o700)


def test_json_stdout_error_object_on_exit_3(capsys):
    code, out, err = main(capsys, "verify", TP_MLP, "-n", "0", "--json", "-")
    assert code == 3 and "must be at least 1" in err
    obj = _valid(json.loads(out))
    assert obj["status"] == "error" and obj["exit_code"] == 3 and obj["schema_version"] == "1"
    assert obj["message"].startswith("--world-size 0: ")


def test_directory_as_case_file_is_a_directory_of_cases(tmp_path, capsys):
    shutil.copy(TP_MLP, tmp_path / "tp_mlp.py")
    code, out, err = main(capsys, "verify", str(tmp_path), "--no-confirm", "-q")
    assert code == 2 and out.startswith("UNKNOWN  tp_mlp at world size 2"), out + err  # one case: no summary
    code, _, err = main(capsys, "verify", TP_MLP, "--plugin", str(tmp_path))
    assert code == 3 and "is a directory; give a .py file" in one_paragraph(err)


@pytest.mark.parametrize("body, shown", [("return {'single': 1}", "returned dict ({'single': 1})"),
                                         ("return None", "returned NoneType (None)"),
                                         ("return 42", "returned int (42)")])
def test_case_returning_no_case_exit_3(tmp_path, capsys, body, shown):
    path = write(tmp_path / "not_a_case.py", f"def case(world_size=2):\n    {body}\n")
    code, _, err = main(capsys, "verify", path)
    text = one_paragraph(err)
    assert code == 3 and f"case() in {path} {shown}, not a shardproof.Case" in text


def test_untraceable_model_names_the_users_line(tmp_path, capsys):
    path = write(tmp_path / "untraceable.py", """\
import torch
from shardproof import Case


def bad(x):
    if x.sum() > 0:  # data-dependent control flow
        return x
    return -x


def case(world_size=2):
    return Case(single=bad, distributed=lambda rank, world: bad, inputs={"x": torch.randn(4)})
""")
    code, _, err = main(capsys, "verify", path)
    text = one_paragraph(err)
    assert code == 3 and "tracing single-device failed" in text
    assert f"(at {path}:6 in bad: `if x.sum() > 0:" in text


def test_case_raising_names_the_users_line(tmp_path, capsys):
    path = write(tmp_path / "raises.py", "def helper():\n    raise ValueError('no weights')\n\n\n"
                                         "def case(world_size=2):\n    return helper()\n")
    code, _, err = main(capsys, "verify", path)
    assert code == 3 and f"ValueError: no weights (at {path}:2 in helper" in one_paragraph(err)


def test_malformed_yaml_keeps_the_problem_mark(tmp_path, capsys):
    rel = write(tmp_path / "rel.yaml", "inputs:\n  fc1.weight: [Shard(0)\n  x: 1\n")
    code, _, err = main(capsys, "verify", TP_MLP, "--relations", rel)
    assert code == 3 and "Traceback" not in err
    assert f'in {rel}, line 2, column 15:' in err
    lines = err.splitlines()
    snippet = lines.index("      fc1.weight: [Shard(0)")
    assert lines[snippet + 1] == "                  ^"  # the caret under the '[', on its own line


def test_misspelt_relation_did_you_mean(tmp_path, capsys):
    rel = write(tmp_path / "rel.yaml", "inputs:\n  fc1.weight: Shrad(0)\n")
    code, _, err = main(capsys, "verify", TP_MLP, "--relations", rel)
    assert code == 3 and "cannot read relation 'Shrad(0)' (did you mean Shard(0)?)" in one_paragraph(err)


def test_stated_relation_contradicted_by_values(tmp_path, capsys):
    rel = write(tmp_path / "rel.yaml", "inputs:\n  fc2.bias: Partial()\n")
    code, out, err = main(capsys, "verify", TP_MLP, "--relations", rel)
    text = one_paragraph(err)
    assert code == 3 and "wrong-dim" not in out + err
    assert f'{rel}:2: the stated relation Partial("sum") for \'fc2.bias\' does not hold: it is contradicted by ' \
           f"the values" in text and "their values fit Replicate()" in text
    rel = write(tmp_path / "rel.yaml", "inputs:\n  fc1.weight: 'Slices(0, {0: (24, 48), 1: (0, 24)})'\n")
    code, _, err = main(capsys, "verify", TP_MLP, "--relations", rel)
    text = one_paragraph(err)
    assert code == 3 and "contradicted by the values" in text and "their values fit Shard(0)" in text


@pytest.mark.fix_search
def test_no_fix_flag_turns_the_fix_search_off(capsys):
    """By default a violation carries its proved fix; `--no-fix` skips the search."""
    code, out, _ = main(capsys, "verify", MISSING, "--json", "-")
    assert code == 1 and _valid(json.loads(out))["findings"][0]["fix"].startswith("insert `all_reduce(sum)`")
    code, out, _ = main(capsys, "verify", MISSING, "--json", "-", "--no-fix")
    assert code == 1 and _valid(json.loads(out))["findings"][0]["fix"] is None
