"""Issue 15, "unknown always says the next step": every way the engine ends in unknown names
what the user can do next (a plug-in for an op, a relation or an expected output to state,
the execution or budget a confirmation needs, example inputs that meet an assumption).

Each test runs a real program to that unknown. The correct scan with a carry (a program
the rules cannot prove yet) is labelled on gloo in tests/test_ops_sharded.py; the others
are correct by construction (the same program on every rank)."""
import json
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from shardproof import Case
from shardproof.api import NO_CONFIRM, prepare, verify_case, verify_dumps, verify_prepared
from shardproof.cli import main
from shardproof.engine import blocks as eb
from shardproof.engine.result import Report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TP_MLP = os.path.join(ROOT, "src", "shardproof", "zoo", "tp_mlp.py")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cases", "ops"))


def _says_next_step(report, *words):
    assert report.status == "unknown", (report.status, report.reason)
    reason = report.reason.lower()
    assert "next step:" in reason, report.reason
    step = reason[reason.index("next step:"):]
    assert all(w.lower() in step for w in words), (words, report.reason)


DUMP = '''\
class GraphModule(torch.nn.Module):
    def forward(self, x: "f32[4, 6]"):
        y: "f32[4, 6]" = torch.ops.{op}.default(x)
        return (y,)
'''


def test_an_op_without_a_rule_names_the_plug_in(tmp_path):
    for side in ("seq", "dist"):
        (tmp_path / side).mkdir()
    (tmp_path / "seq" / "fw.g0.r0.py").write_text(DUMP.format(op="acme.frobnicate"))
    for r in range(2):
        (tmp_path / "dist" / f"fw.g0.r{r}.py").write_text(DUMP.format(op="acme.frobnicate"))
    report = verify_dumps(str(tmp_path / "seq"), str(tmp_path / "dist"), auto_relations=True)
    _says_next_step(report, "declare a rule for acme.frobnicate", "--plugin")


def test_an_unproved_correct_program_names_a_rule_or_a_relation():
    import sharded_ops
    report = verify_prepared(prepare(sharded_ops.build(2, "cumsum_with_carry"), 2))  # correct (gloo), no lemma
    _says_next_step(report, "expect:", "inputs:")


def test_no_confirm_names_the_confirmation():
    from tp_mlp import case
    report = verify_case(case(), confirm_draws=NO_CONFIRM)
    assert report.reason.startswith("proved, but not confirmed by execution")
    _says_next_step(report, "without --no-confirm")


def test_an_execution_that_cannot_run_names_what_it_needs():
    from tp_mlp import case
    report = verify_case(case(), confirm_draws=NO_CONFIRM)  # the proof, then a confirmation that failed
    from shardproof.engine.confirm import settle
    from shardproof.engine.result import Confirmation
    report.status, report.reason = "verified", ""
    settled = settle(report, Confirmation("torch", 0, "skipped", "needs 40.0 GiB, over the 4 GiB bound"))
    _says_next_step(settled, "--max-memory", "constants:")


def _ignored_targets() -> Case:
    """Cross-entropy with an ignored target (-100) in the example inputs, the same program on
    every rank: correct, but the example inputs break the rules' assumption about targets."""
    def program(x, t):
        return {"loss": F.cross_entropy(x, t)}
    g = torch.Generator().manual_seed(0)
    t = torch.tensor([1, -100, 3, 0])
    return Case(single=program, distributed=lambda rank, world: program, world_size=2, name="ignored_targets",
                inputs={"x": torch.randn(4, 5, generator=g), "t": t}, expect={"loss": "Replicate()"})


def test_example_inputs_breaking_an_assumption_name_the_inputs():
    report = verify_case(_ignored_targets())
    if report.status == "verified":
        pytest.skip("the rules no longer rely on the assumption for this program")
    assert any("NOT MET" in a for a in report.assumptions), report.assumptions
    _says_next_step(report, "example inputs")


def test_a_budget_that_runs_out_names_the_budget(capsys, tmp_path):
    out = tmp_path / "r.json"
    assert main(["verify", TP_MLP, "--timeout", "0.001", "--json", str(out)]) == 2
    capsys.readouterr()
    data = json.loads(out.read_text())
    report = Report(data["status"], data["world_size"], reason=data["reason"])
    _says_next_step(report, "--timeout", "--max-memory")


def test_block_contracts_that_do_not_chain_name_the_relation():
    def contract(key, layers, y):
        return eb.Contract(key, layers, {"x": "Replicate()", "g": "Replicate()"}, {"y": y, "grad_x": "Replicate()"},
                           Report("unknown", 2, reason="proved, but not confirmed by execution: not run"))
    a, b = contract("a", [0, 2], "Replicate()"), contract("b", [1], 'Partial("sum")')
    report = eb.combine(["a", "b", "a"], {"a": a, "b": b}, {"x": "Replicate()", "g": "Replicate()"})
    assert "do not chain" in report.reason
    _says_next_step(report, "inputs:")


def test_partial_outputs_name_the_allowance(tmp_path):
    from test_partial_outputs import _graph
    for folder, ranks, cols, reduce in (("tp1", 1, 6, False), ("tp2", 2, 3, False)):
        (tmp_path / folder).mkdir()
        for r in range(ranks):
            (tmp_path / folder / f"fw.g0.r{r}.py").write_text(_graph(cols, reduce))
    (tmp_path / "rel.yaml").write_text("inputs:\n  x: Shard(1)\n  w: Shard(0)\n")
    report = verify_dumps(tmp_path / "tp1", tmp_path / "tp2", str(tmp_path / "rel.yaml"), auto_relations=True)
    _says_next_step(report, "--allow-partial-outputs grad")
