"""The training step's tail by class contracts (issue 16; shardproof.step_tail, ops/tail_calls.py):
each parameter's optimizer update is one opaque call whose meaning is a class contract proved
once per (optimizer hyperparameters, shape, dtype, layout); the tail is traced once per tp class
(the opaque layer calls' groups abstracted like collectives'). A layer whose tail differs -- another
learning rate or weight decay, a gradient left out of the clipping or of the dp all_reduce -- is
never verified: its update is another class (another term) or its operands are not the single
device's, and the step is located at that layer by the full trace it falls back to.
Labels: every step run on a real gloo group (4 processes) against the single-device step,
clipping and AdamW included (tests/gloo.py training_step_agrees)."""
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src", "shardproof", "zoo", "train"))

import llama_step  # noqa: E402
from shardproof.api import NO_CONFIRM  # noqa: E402
from shardproof.step_blocks import verify_step  # noqa: E402

CASES = {bug: os.path.join(HERE, "cases", f"step_llama_tail_{bug.replace('-', '_')}1.py")
         for bug in ("lr", "weight-decay", "no-clip")}
CASES["no-dp-reduce"] = os.path.join(HERE, "cases", "step_llama_tail_bug.py")
ADAMW = "AdamW(lr=0.01, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, step=3)"


@pytest.fixture(scope="module")
def correct():
    return verify_step(llama_step.step_case(2), confirm_draws=0)  # confirmed on gloo on the case's own values


def _bug(bug):
    return verify_step(llama_step.step_case(2, buggy_layer=1, bug=bug), confirm_draws=NO_CONFIRM)


def test_correct_step_updates_by_class(correct):
    assert correct.status == "verified", correct.reason
    assert correct.confirmation is not None and correct.confirmation.by == "gloo"
    assert "fallback" not in correct.blocks
    updates = correct.blocks["updates"]
    # 2 layers x 9 parameters, in 6 classes (norms; wq; wk/wv; wo; w1/w3; w2), each proved once
    assert sum(u["parameters"] for u in updates) == 18 and len(updates) == 6
    assert all(u["proved"] and u["optimizer"] == ADAMW for u in updates)
    assert sorted((tuple(u["shape"]), u["parameters"]) for u in updates if "Shard(0)" in u["layout"]) == \
        [((16, 32), 4), ((32, 32), 2), ((64, 32), 4)]
    assert "18 opaque parameter updates in 6 classes (6 proved)" in correct.blocks["tail"]
    outputs = {o.name: o for o in correct.outputs}
    assert all(outputs[f"updated:layers.{i}.{n}.weight"].holds for i in (0, 1) for n in ("wq", "w2", "ffn_norm"))


def test_tail_traced_once_per_tp_class(correct):
    """The dp replicas of the opaque step are one rank class (the layer calls' groups are
    abstracted like a collective's), so the tail is traced for 2 ranks of 4."""
    classes = correct.rank_classes
    assert classes and sorted(len(c["ranks"]) for c in classes) == [2, 2], classes


def _failing(report) -> set:
    return {o.name for o in report.outputs if not o.holds}


def test_other_learning_rate_for_one_layer_located():
    report = _bug("lr")
    assert report.status == "violation"
    assert report.blocks["fallback"].startswith("the tail with the contracts is violation")
    # exactly layer 1's updated parameters fail; its gradients and layer 0 hold
    assert _failing(report) == {f"updated:layers.1.{n}.weight" for n in llama_step.PARAMS}
    assert report.findings and "layers.1." in report.findings[0].message


def _rule_ctx():
    from shardproof.algebra.layout import Val, full
    from shardproof.algebra.terms import TermStore
    from shardproof.ops import tail_calls as tc
    from shardproof.ops.registry import RuleCtx
    terms = TermStore()
    P, G, M, V = (terms.make("input", (n, "float32"), (), (4, 3)) for n in "pgmv")
    return tc, terms, RuleCtx(terms, None, 0, 2), (P, G, M, V), Val, full


def test_update_rule_applies_only_to_proved_classes():
    """The rule: the whole-tensor update is the term itself; a rank's selection only for a
    proved class, with every operand holding that same selection; another optimizer key is
    another term (the single device's update is not what the rank computed)."""
    tc, terms, ctx, (P, G, M, V), Val, full = _rule_ctx()
    rows = (np.arange(2, 4, dtype=np.int64), None)
    single = tc._update_rule(ctx, full(terms, P), full(terms, G), [full(terms, M), full(terms, V)], ADAMW)
    ops = [Val(t, rows) for t in (P, G, M, V)]
    with pytest.raises(tc.NotCovered):  # not proved
        tc._update_rule(ctx, ops[0], ops[1], ops[2:], ADAMW)
    cls = tc.class_of(ADAMW, (4, 3), None, tc.selection(rows, (4, 3)))
    tc.PROVED.add(cls)
    try:
        rank = tc._update_rule(ctx, ops[0], ops[1], ops[2:], ADAMW)
        assert rank.t == single.t and list(rank.vecs[0]) == [2, 3]
        with pytest.raises(tc.NotCovered):  # the gradient holds other rows than the parameter
            tc._update_rule(ctx, ops[0], Val(G, (np.arange(0, 2, dtype=np.int64), None)), ops[2:], ADAMW)
        with pytest.raises(tc.NotCovered):  # a state of another shape
            other = terms.make("input", ("w", "float32"), (), (2, 3))
            tc._update_rule(ctx, ops[0], ops[1], [ops[2], full(terms, other)], ADAMW)
        other_lr = ADAMW.replace("lr=0.01", "lr=0.02")
        assert tc._update_rule(ctx, full(terms, P), full(terms, G), [full(terms, M), full(terms, V)],
                               other_lr).t != single.t
    finally:
        tc.PROVED.discard(cls)


@pytest.mark.slow  # gloo processes, one full-trace fallback each
@pytest.mark.parametrize("bug", ["weight-decay", "no-clip", "no-dp-reduce"])
def test_tail_bug_of_one_layer_located(bug):
    report = _bug(bug)
    assert report.status == "violation"
    assert report.blocks["fallback"].startswith("the tail with the contracts is")
    failing = _failing(report)
    if bug == "weight-decay":
        assert failing == {f"updated:layers.1.{n}.weight" for n in llama_step.PARAMS}
    elif bug == "no-clip":
        assert failing == {"grad:layers.1.wq.weight", "updated:layers.1.wq.weight"}
    else:  # the unreduced squares enter the global norm: every output fails, the finding is in the norm's sum
        assert len(failing) == 36 and report.findings[0].source.split(" in ")[-1] == "grad_norm"


@pytest.mark.slow  # 5 gloo groups of 4 processes (one spawn of 4 processes runs them all)
def test_labels_on_gloo():
    from gloo import training_steps_agree
    labels = training_steps_agree([os.path.join(HERE, "cases", "step_llama2.py"), *CASES.values()], 4, 2)
    assert labels[0], "the correct step"
    for bug, agrees in zip(CASES, labels[1:]):
        assert not agrees, bug
