"""Proved fix suggestions (issue 17): for a zoo bug, the repair shown is of the bug's class,
and the repaired rank graphs verify -- checked here by calling the verifier again on them
and by executing them with torch's kernels (the dumps' confirmation path) against the
single-device program. Where no candidate repair verifies, no fix is shown (the hint stays).

The zoo bugs themselves are labelled by running them on gloo (tests/test_zoo.py,
tests/test_training.py); the repaired programs are graph edits, confirmed here by execution
of the edited graphs."""
import importlib
import io
import json
from dataclasses import replace

import pytest

import conftest  # noqa: F401 - puts the zoo folders on sys.path

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import NO_CONFIRM, prepare, suggest_fix, verify_prepared  # noqa: E402
from shardproof.engine.repair import candidates  # noqa: E402
from shardproof.engine.verify import differing_outputs, verify_graphs  # noqa: E402

pytestmark = pytest.mark.fix_search  # the default search for proved fixes is on here

FAST = [  # (zoo case, repair class)
    ("missing_allreduce", "insert-reduction"),
    ("double_allreduce", "remove-reduction"),
    ("allreduce_avg", "reduce-op"),
    ("attention_scale_local_heads", "constant"),
    ("constant_pow_one_rank", "constant"),
    ("sp_layernorm_wrong_shard", "slice"),
]
SLOW = [
    ("rescaled_accumulation", "scale"),
    ("dtensor_wrong_plan", "insert-reduction"),
    ("tokenspeed_80_full_mlp_summed", "remove-reduction"),
    ("pytorch_165962_max_of_partial", "move-reduction"),
    ("attention_scale_one_rank", "constant"),
    ("constant_add_all_ranks", "constant"),
    ("constant_pow_all_ranks", "constant"),
    ("rank_constant_mismatch", "constant"),
    ("wrong_slice_offset", "slice"),
    ("clip_local_norm", "insert-reduction"),
    ("dtensor_dp_grads_not_reduced", "insert-reduction"),
    ("moe_router_grad_not_reduced", "insert-reduction"),
    ("deepspeed_5248_sp_grad_not_divided", "reduce-op"),
    ("dp_double_average", "reduce-op"),
    ("fsdp2_divide_factor_root_only", "reduce-op"),
    ("moe_expert_grad_doubled_ep2", "scale"),
    ("verdict07_eps_add_one_rank", "constant"),
    ("verdict08_pow_one_rank", "constant"),
    ("verdict08_pow_all_ranks", "constant"),
    ("verdict09_eps_add_two_ranks", "constant"),
    ("replicated_grad_wrong_group", "scale"),
    ("moe_expert_grad_ep_times_too_large", "reduce-op"),
    ("verdict12_attention_scale_one_rank", "constant"),
    ("verdict13_attention_scale_all_ranks", "constant"),
]
NOT_EXECUTABLE = {"fsdp2_divide_factor_root_only"}  # its graphs hold profiler record_function ops
NO_FIX = ["nonlinearity_on_partial", "bias_before_allreduce", "allgather_wrong_dim"]


WORLDS = {"verdict09_eps_add_two_ranks": 4, "replicated_grad_wrong_group": 4,  # bugs that need 4 ranks
          "moe_expert_grad_ep_times_too_large": 4, "verdict12_attention_scale_one_rank": 4,
          "verdict13_attention_scale_all_ranks": 4}


def _prepared(name: str, world: int | None = None):
    world = world or WORLDS.get(name, 2)
    return prepare(importlib.import_module(name).case(world), world)


def _check_fix(name: str, klass: str):
    p = _prepared(name)
    report = verify_prepared(p, fixes=False)
    assert report.status == "violation", report.reason
    finding = report.findings[0]
    assert finding.fix is None
    repair = suggest_fix(p, finding)
    assert repair is not None, f"no proved fix for {name} ({finding.kind} at {finding.node})"
    assert finding.fix == repair.what
    assert repair.kind == klass, (repair.kind, repair.what)
    # the repaired graphs verify: the verifier again, on them
    again = verify_graphs(p.seq, repair.program, p.bindings, p.expect, examples=p.examples, gradients=p.gradients)
    assert (again.status, again.strength) == ("verified", "proof"), (again.reason, again.findings[:1])
    for seed in (1, 2):
        assert differing_outputs(p.seq, repair.program, p.bindings, p.expect, p.examples, seed=seed)[0] == []
    # ... and executing the repaired graphs with torch's kernels confirms the proof
    confirmed = verify_prepared(replace(p, dist=repair.program, case=None), fixes=False, confirm_draws=1)
    if name in NOT_EXECUTABLE:  # an op torch_exec has no kernel for: the proof stands, never contradicted
        assert confirmed.confirmation.outcome == "skipped", confirmed.confirmation
        assert "no torch kernel" in confirmed.confirmation.detail
    else:
        assert confirmed.status == "verified", (confirmed.reason, confirmed.confirmation)
        assert confirmed.confirmation.outcome == "confirmed"
    # the original program is untouched
    assert verify_graphs(p.seq, p.dist, p.bindings, p.expect, examples=p.examples,
                         gradients=p.gradients).status == "violation"
    return repair


@pytest.mark.parametrize("name,klass", FAST)
def test_proved_fix(name, klass):
    _check_fix(name, klass)


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("name,klass", SLOW)
def test_proved_fix_sweep(name, klass):
    _check_fix(name, klass)


def test_fix_text_names_the_source_line():
    p = _prepared("missing_allreduce")
    repair = suggest_fix(p, verify_prepared(p, fixes=False).findings[0])
    assert repair.what == ("insert `all_reduce(sum)` after line 15 of missing_allreduce.py "
                           "(`y = F.linear(h, self.fc2.weight)`)")
    assert repair.node == "mm"


def test_fix_in_report_terminal_and_json():
    from rich.console import Console

    from shardproof.report.terminal import render
    p = _prepared("double_allreduce")
    report = verify_prepared(p, confirm_draws=NO_CONFIRM)
    f = report.findings[0]
    assert f.kind == "reduced-twice" and f.fix and f.fix.startswith("remove `all_reduce(sum)` at line 19")
    assert report.to_json()["findings"][0]["fix"] == f.fix
    json.dumps(report.to_json())
    out = io.StringIO()
    render(report, Console(file=out, width=200, color_system=None))
    assert "proved fix: remove `all_reduce(sum)` at line 19" in out.getvalue()


@pytest.mark.parametrize("name", NO_FIX)
def test_no_fix_when_no_repair_verifies(name):
    p = _prepared(name)
    report = verify_prepared(p)
    assert report.status == "violation"
    f = report.findings[0]
    assert f.fix is None, f.fix
    assert f.hint, "the existing hint stays"
    for c in candidates(p.seq, p.dist, f):  # every candidate was refused because it does not verify
        assert verify_graphs(p.seq, c.program, p.bindings, p.expect, examples=p.examples).status != "verified", c.what


def test_unknown_op_has_no_fix():
    report = verify_prepared(_prepared("unknown_op"))
    assert report.status == "unknown"
    assert all(f.fix is None for f in report.findings)


def test_verified_case_has_no_fix():
    report = verify_prepared(_prepared("tp_mlp"), confirm_draws=NO_CONFIRM)
    assert report.status != "violation" and not report.findings


INVERSES = {"drop-collective": "insert-reduction", "duplicate-collective": "remove-reduction",
            "reduce-op": "reduce-op", "wrong-group": "group", "scale-tensor": "scale"}


def test_repair_inverts_mutations():
    """Repair is the inverse of mutation: every mutant of a correct program (tp_mlp at
    world size 4) that the rules reject gets a proved fix of the inverse class, and the
    repaired graphs verify and run equal to the single-device program."""
    from shardproof.engine.mutants import mutants
    from shardproof.engine.repair import suggest
    p = _prepared("tp_mlp", 4)
    seen = set()
    for m in mutants(p.dist, list(INVERSES), p.bindings, p.examples):
        if m.program is None:
            continue
        report = verify_graphs(p.seq, m.program, p.bindings, p.expect, examples=p.examples)
        assert report.status == "violation", m.what
        repair = suggest(p.seq, m.program, p.bindings, p.expect, p.examples, report.findings[0])
        assert repair is not None, m.what
        assert repair.kind == INVERSES[m.operator], (m.what, repair.what)
        again = verify_graphs(p.seq, repair.program, p.bindings, p.expect, examples=p.examples)
        assert again.status == "verified", (m.what, repair.what)
        confirmed = verify_prepared(replace(p, dist=repair.program, case=None), fixes=False, confirm_draws=1)
        assert confirmed.confirmation.outcome == "confirmed", (m.what, confirmed.confirmation)
        seen.add(m.operator)
    assert seen == set(INVERSES)
