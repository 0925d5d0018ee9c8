"""A whole training plan verified end to end in stages (issue 16, shardproof.plan_e2e): the
small version of the 405B-like plan (llama_plan.SMALL: 4 Llama layers at real-like head dim 16,
proved on fake tensors from stated relations and confirmed at reduced widths; the training step
at dp4 tp2 with 4 microbatches, AdamW and clipping, proved at every rank and confirmed on gloo
at dp2). A bug in one layer, in the step's tail and on one dp rank is each located in its stage.
Labels: the same programs run on a real gloo group against the single-device ones."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src", "shardproof", "zoo", "train"))

import llama_plan as P  # noqa: E402
from conftest import validate_report_json  # noqa: E402
from gloo import run_on_gloo, tp_gradients_agree  # noqa: E402
from shardproof.plan_e2e import Stage, verify_plan  # noqa: E402

STEP = os.path.join(HERE, "cases", "plan_small_step.py")
STACK = os.path.join(HERE, "cases", "blocks_stack.py")
SPEC = P.SMALL


@pytest.fixture(scope="module")
def layers():
    """The plan's (bug-free) layers stage, run once for the plans below (the same program)."""
    return P.layers_stage(SPEC)


def _plan(layers, bug=None, where=None):
    """llama_plan's composition with `bug`; its layers stage's report is `layers`."""
    stages = P.stages(SPEC, bug, where)
    first = stages[0]
    stages[0] = Stage(first.name, first.covers, first.proved, first.confirmed, lambda: layers, first.confirmed_of,
                      first.extra)
    return verify_plan(stages, name=SPEC.name, world_size=SPEC.dp * SPEC.tp, not_covered=P.not_covered(SPEC))


@pytest.fixture(scope="module")
def correct(layers):
    return _plan(layers)


@pytest.mark.sweep  # gloo processes (3 steps of 8 ranks, a stack of 2): make test-all
def test_labels_on_gloo():
    """Correct step agrees with the single device; the tail and dp-rank bugs do not; the
    layer bug (same code, same layer, tp2) changes the stack's output."""
    assert tp_gradients_agree(STEP, 8, SPEC.tp)
    assert not tp_gradients_agree(os.path.join(HERE, "cases", "plan_small_step_tail_bug.py"), 8, SPEC.tp)
    assert not tp_gradients_agree(os.path.join(HERE, "cases", "plan_small_step_dp_rank_bug.py"), 8, SPEC.tp)
    assert tp_gradients_agree(os.path.join(HERE, "cases", "plan_small_tail.py"), 4, SPEC.tp)  # stage tail's step
    assert not tp_gradients_agree(os.path.join(HERE, "cases", "plan_small_tail_bug3.py"), 4, SPEC.tp)
    runs = run_on_gloo(STACK, [{"n_layers": SPEC.layers}, {"n_layers": SPEC.layers, "buggy_layer": 2},
                               {"n_layers": 12, "buggy_layer": 9}], SPEC.tp, seed=None)  # the longer stack's bug too
    worst = [max(float((r[k].double() - single[k].double()).abs().max()) for r in ranks for k in ("y", "grad_x"))
             for single, ranks in runs]
    assert worst[0] < 1e-5 and worst[1] > 1e-3 and worst[2] > 1e-3, worst


@pytest.mark.slow  # the plan's two stages: ~20-40 s CPU (gloo processes included)
def test_plan_verified_end_to_end(correct):
    assert correct.status == "verified", correct.reason
    plan = correct.plan
    assert [s["stage"] for s in plan["stages"]] == ["layers", "step", "tail"]
    assert all(s["status"] == "verified" for s in plan["stages"])
    layers, step, tail = plan["stages"]
    assert "real sizes (hidden 128" in layers["proved"] and "fake tensors" in layers["proved"]
    assert layers["confirmed"].startswith("by execution at reduced widths (hidden 32") and "matched" in \
        layers["confirmed"]
    assert step["proved"].startswith("dp4 tp2 M4, every rank") and "reduced widths" in step["proved"]
    assert "dp2 tp2 M4" in step["confirmed"] and "not the plan's 8" in step["confirmed"]  # said, not hidden
    # the plan's report is its last stage's (tail, at dp2): its confirmation says the world it ran at
    assert correct.plan["decided_by"] == "tail" and correct.confirmation.by == "gloo"
    detail = correct.confirmation.detail
    assert detail.startswith("at world 4 (llama_step_N2_") and "N4_dp2" in detail and "plan's world is 8" in detail
    assert correct.world_size == 8 and correct.plan["not_covered"]
    # the step's proof covered every rank and every parameter's update
    assert {c["representative"] for c in correct.rank_classes} and all(p["updated"] for p in correct.parameters)
    assert step["wall_seconds"] > 0 and step["cpu_seconds"] > 0 and all(s["peak_rss_mb"] > 0 for s in plan["stages"])
    # the step's proof: one rank class per tp rank, the dp members derived
    assert step["machinery"]["ranks"] == 8 and 0 < step["machinery"]["rank_classes"] < 8
    # stage tail: every layer's parameters updated through the proved update classes, at dp2 (said)
    assert tail["proved"].startswith("dp2 tp2 M2 (not the plan's dp4 M4)") and tail["layers"] == SPEC.layers
    assert "all 4 layers" in tail["proved"] and "with 2 of the 4 layers" in tail["confirmed"]  # executed: said
    # 9 parameters per layer in 5 classes: norms; wq; wk, wv, w1, w3 (16 x 32, Shard(0)); wo; w2
    assert tail["machinery"]["updated_parameters"] == 9 * SPEC.layers and tail["machinery"]["update_classes"] == 5
    validate_report_json(correct.to_json())  # report.plan is in the schema


def test_bug_in_one_layer_located():
    report = P.verify_llama_plan(SPEC, bug="layer", where=2)
    assert report.status == "violation"
    assert report.plan["decided_by"] == "layers" and report.reason.startswith("stage layers")
    assert report.findings and all(f.layer == 2 for f in report.findings)
    assert report.blocks["layers"] == [0, 0, 1, 0]  # layer 2 is a class of its own
    assert report.plan["stages"][1]["status"] == "not run"


def test_bug_in_a_later_layer_of_a_longer_stack_located():
    """One changed layer among many (the 405B plan's layer 77 of 126, at small sizes: layer 9 of
    12): the real-size screening keeps it a class of its own; the violation names that layer."""
    from dataclasses import replace
    spec = replace(SPEC, layers=12)
    report = P.verify_llama_plan(spec, bug="layer", where=9)
    assert report.status == "violation" and report.plan["decided_by"] == "layers"
    assert report.findings and all(f.layer == 9 for f in report.findings)
    assert report.blocks["layers"] == [0] * 9 + [1, 0, 0]  # 2 distinct blocks: the changed one proved on its own
    assert [s["status"] for s in report.plan["stages"]][1:] == ["not run", "not run"]


def _found_by_the_step(layers, bug, where):
    """The plan with `bug`: a violation decided by stage step (the layers verified); its first finding."""
    report = _plan(layers, bug, where)
    assert report.status == "violation" and report.plan["decided_by"] == "step"
    assert report.plan["stages"][0]["status"] == "verified"
    return report, report.findings[0]


@pytest.mark.slow  # the plan's two stages: ~20-40 s CPU (gloo processes included)
def test_bug_in_the_tail_located(layers):
    _, first = _found_by_the_step(layers, "tail", 0)
    assert first.kind == "missing-gradient-reduction" and "mini_megatron.py" in first.source


@pytest.mark.sweep  # ~96 s CPU: stage tail falls back to the full trace of the 4-layer step (make test-all)
def test_bug_in_the_tail_of_a_later_layer_located(layers):
    """Layer 3's gradients never all-reduced over dp: the step stage (1 layer) cannot see it;
    stage tail (all 4 layers) finds it, first in the clipping norm, which sums the unreduced
    squares (the finding names the norm, not the layer: see test_step_contracts' tail bug)."""
    report = _plan(layers, "tail", 3)
    assert report.status == "violation" and report.plan["decided_by"] == "tail", report.reason
    assert [s["status"] for s in report.plan["stages"]] == ["verified", "verified", "violation"]
    assert report.blocks["fallback"].startswith("the tail with the contracts is")  # not proved by the contracts
    first = report.findings[0]
    assert first.kind == "missing-gradient-reduction" and "mini_megatron.py" in first.source and \
        "grad_norm" in first.source


@pytest.mark.slow  # the plan's two stages: ~20-40 s CPU (gloo processes included)
def test_bug_on_one_dp_rank_located(layers):
    report, first = _found_by_the_step(layers, "dp-rank", 3)
    assert first.rank == [6, 7]  # dp rank 3 = global ranks 6 and 7 (tp2)
    assert "llama_step.py" in first.source and "microbatch_loss" in first.source
    assert any(6 in c["ranks"] for c in report.rank_classes)


@pytest.mark.slow  # the plan's two stages: ~20-40 s CPU (gloo processes included)
def test_terminal_says_what_each_stage_proved_where(correct):
    from rich.console import Console
    from shardproof.report.terminal import render
    console = Console(record=True, width=400)
    render(correct, console)
    text = console.export_text()
    assert "stage layers: verified; proved at real sizes (hidden 128" in text
    assert "stage step: verified; proved at dp4 tp2 M4" in text and "not the plan's 8" in text
