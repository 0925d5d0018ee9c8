"""The CLI contract: exit codes, JSON report, clear one-paragraph errors."""
import json
import subprocess
import sys

from conftest import ROOT

SHARDPROOF = [sys.executable, "-m", "shardproof.cli"]


def run(*args, cwd=ROOT):
    return subprocess.run(SHARDPROOF + list(args), cwd=cwd, capture_output=True, text=True, timeout=300)


def test_verified_exit_0():
    p = run("verify", "src/shardproof/zoo/tp_mlp.py")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "VERIFIED" in p.stdout


def test_violation_json(tmp_path):
    out = tmp_path / "out.json"
    p = run("verify", "src/shardproof/zoo/bugs/missing_allreduce.py", "--json", str(out))
    assert p.returncode == 1, p.stdout + p.stderr
    report = json.loads(out.read_text())
    assert report["status"] == "violation"
    f = report["findings"][0]
    for key in ("kind", "rank", "node", "op", "source", "message"):
        assert key in f
    assert (f["node"], f["op"], f["rank"], f["kind"]) == ("add", "aten.add", [0, 1], "partial-sum-never-reduced")
    assert "missing_allreduce.py" in f["source"]
    assert {"seconds", "nodes_seq", "nodes_dist"} <= set(report["stats"])


def test_missing_file_exit_3():
    p = run("verify", "examples/does_not_exist.py")
    assert p.returncode == 3
    assert "does not exist" in p.stderr and "Traceback" not in p.stderr


def test_broken_case_file_exit_3(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def case(:\n")
    p = run("verify", str(bad))
    assert p.returncode == 3 and "not valid Python" in " ".join(p.stderr.split()) and "Traceback" not in p.stderr


def test_help_has_examples():
    p = run("verify", "--help")
    assert p.returncode == 0 and "examples:" in p.stdout and "exit codes" in p.stdout


def test_relation_with_impossible_shapes_exit_3():
    p = run("verify", "tests/cases/bad_shape_relation.py")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "cannot match" in " ".join(p.stderr.split()) and "Traceback" not in p.stderr


def test_relation_naming_missing_tensor_exit_3():
    p = run("verify", "tests/cases/missing_tensor_relation.py")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "fc9.weight" in p.stderr and "Traceback" not in p.stderr


def test_bad_relations_yaml_exit_3(tmp_path):
    f = tmp_path / "rel.yaml"
    f.write_text("inputs:\n  fc1.weight: Shard(\n")
    p = run("verify", "src/shardproof/zoo/tp_mlp.py", "--relations", str(f))
    assert p.returncode == 3 and "cannot read relation" in " ".join(p.stderr.split()), p.stderr


def test_unknown_op_exit_2():
    p = run("verify", "src/shardproof/zoo/bugs/unknown_op.py")
    assert p.returncode == 2 and "aten.special_bessel_j0" in p.stdout


def test_relations_file_expect_section_for_a_case(tmp_path):
    f = tmp_path / "rel.yaml"
    f.write_text("expect:\n  out: Shard(0)\n")  # tp_mlp's output is replicated, not sharded
    p = run("verify", "src/shardproof/zoo/tp_mlp.py", "--relations", str(f))
    assert p.returncode == 1 and "Shard(0)" in p.stdout, p.stdout + p.stderr
    f.write_text("constants:\n  c: 1\n")
    p = run("verify", "src/shardproof/zoo/tp_mlp.py", "--relations", str(f))
    assert p.returncode == 3 and "are for graph dumps" in " ".join(p.stderr.split()), p.stderr


def test_mutants_command_prints_the_kill_rate(tmp_path):
    out = tmp_path / "mutants.json"
    p = run("mutants", "src/shardproof/zoo/tp_mlp.py", "--json", str(out))
    report = json.loads(out.read_text())
    totals = report["totals"]
    assert p.returncode == (1 if totals.get("survived") else 0), p.stdout + p.stderr  # exit 1: a survivor
    live = sum(totals.values()) - totals.get("equivalent", 0)
    assert report["kill_rate"] == round(totals["killed"] / live, 4)
    assert f"kill rate: {report['kill_rate']:.1%}" in p.stdout
