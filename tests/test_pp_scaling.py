"""PyTorch's default loss scaling under ``torch.distributed.pipelining`` (issue 18): a mean
loss per microbatch with the schedule dividing the accumulated gradients by the microbatch
count (``scale_grads=True``). Each microbatch's backward then carries M times its share of
the single-device gradient through RMSNorm, attention with RoPE and SwiGLU; the exact factor
floats out of every linear-in-the-gradient step (algebra/scaling.py), so the Llama step
verifies. A gradient scaled twice (``scale_grads`` plus a manual 1/M in the loss) is a
violation at the
schedule's division of ``.grad``, on stage 0's rank, after the last microbatch. Every pair is labelled on a real gloo group."""
import importlib

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import prepare, verify_prepared  # noqa: E402
from test_pipelining import _gloo_label  # noqa: E402

SCHEDULES = importlib.import_module("pp_schedules")
LLAMA = importlib.import_module("pp_llama_schedules")


class DoubleScaled(SCHEDULES.ScheduledPipeline):
    """BUG: the loss divided by the microbatch count by hand (the gradient-accumulation habit)
    while the schedule scales the gradients too: every gradient is 1/M of the right one (the
    reported loss, a sum of the divided means, is right)."""

    def loss_fn(self, inputs):
        return lambda out, target: SCHEDULES.mse(out, target) / self.microbatches

    def total_loss(self, losses):
        return sum(losses)


def _verify(model, schedule="1f1b", stack=LLAMA):
    prepared = prepare(stack.case(2, schedule, model=model), 2)
    return prepared, verify_prepared(prepared, fixes=False)


@pytest.fixture(scope="module")
def default_1f1b():
    return _verify(LLAMA.ScheduledPipeline)


def test_llama_default_loss_scaling_verified(default_1f1b):
    """Schedule1F1B at pp2, 4 microbatches, mean loss, ``scale_grads``: the loss and every
    parameter's gradient (attention and norm weights of stage 0 included, reached through the
    gradient received from stage 1) equal the whole model's step."""
    prepared, report = default_1f1b
    assert report.status == "verified", (report.reason, report.findings[:1])
    checked = {o.name: o.holds for o in report.outputs}
    assert checked.pop("loss") == "Replicate()" and len(checked) == 18
    assert set(checked.values()) == {"Replicate()"}, checked
    assert report.temporal["checked"] and report.temporal["findings"] == 0, report.temporal


@pytest.mark.parametrize("stack", [SCHEDULES, pytest.param(LLAMA, marks=pytest.mark.sweep)], ids=["mlp", "llama"])
def test_double_scaled_gradient_is_a_violation_after_the_last_microbatch(stack):
    """scale_grads plus a manual 1/M: a violation (never verified). Each microbatch's own
    backward is exactly the summed-loss form's (its loss gradient is 1/(M * microbatch
    elements) = 1/batch elements), so the first tensor off is the schedule's division of the
    accumulated ``.grad`` by M: found there, on stage 0's rank, after the last microbatch."""
    _, report = _verify(DoubleScaled, stack=stack)  # the Llama step: ~50 s on 2 loaded cores
    assert report.status == "violation", report.reason
    f = report.findings[0]
    assert f.rank[0] == 0 and f.op == "aten.div", f
    assert (f.stage, f.microbatch, f.schedule_point) == (0, None, "after the last microbatch"), f
    assert "pipeline stage 0, after the last microbatch on rank 0" in f.message, f.message
    assert "pp_schedules.py" in f.source and "run_schedule" in f.source, f.source  # the sched.step(...) call


@pytest.mark.parametrize("stack", [SCHEDULES, LLAMA], ids=["mlp", "llama"])
@pytest.mark.parametrize("model,label", [(LLAMA.ScheduledPipeline, "correct"), (DoubleScaled, "wrong")],
                         ids=["default", "double-scaled"])
def test_gloo_labels(stack, model, label):
    """Schedule1F1B on a real gloo group: the whole model's gradients, or not."""
    assert _gloo_label(lambda: stack.case(2, "1f1b", model=model), 2) == label
