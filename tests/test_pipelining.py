"""PyTorch's own ``torch.distributed.pipelining`` schedules captured (issue 18): PipelineStage
with static shapes under ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B (two stages per
rank), ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble, over an MLP stack at pp2,
verified against the whole model's step; a receive buffer reused while autograd holds it
(minimal and in a 1F1B stage) is a ``saved-buffer-overwritten`` at the receive. Every pair
is labelled on a real gloo group (``test_gloo_labels``)."""
import importlib
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import run_fn_on_gloo  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402
from shardproof.ir.events import ISSUE  # noqa: E402

SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b", "interleaved_zb", "zbv")


def _verify(case, world):
    prepared = prepare(case, world)
    return prepared, verify_prepared(prepared, fixes=False)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_pipelining_mlp_pp2_verified(schedule):
    """Loss and every gradient equal the whole model's; the schedule's P2P ops are paired
    graph nodes, each issue marked with its stage and microbatch and waited on; no temporal
    finding (warm-up, steady state, cool-down, zero-bubble weight passes)."""
    module = importlib.import_module("pp_schedules")
    prepared, report = _verify(module.case(2, schedule), 2)
    assert report.status == "verified", (report.reason, report.findings[:1])
    checked = {o.name: o.holds for o in report.outputs}
    assert checked.pop("loss") == "Replicate()" and len(checked) == 8
    assert set(checked.values()) == {"Replicate()"}, checked
    assert report.temporal["checked"] and report.temporal["findings"] == 0, report.temporal
    per_rank = 2 if schedule in ("interleaved_1f1b", "interleaved_zb", "zbv") else 1
    for rank, graph in enumerate(prepared.dist.graphs):
        mine = set(module.stages_of(rank, 2, schedule))
        assert len(mine) == per_rank
        issues = graph.events.p2p()
        # activations and gradients of 4 microbatches, each way, per stage boundary this rank touches
        assert issues and all(e.stage in mine and e.microbatch in range(4) for e in issues), issues[:2]
        assert {s for s, _ in graph.positions.values()} == mine


def test_pipelining_grads_not_scaled_is_a_violation_at_a_stage():
    """The schedule told not to scale gradients (``scale_grads=False``) with a mean loss per
    microbatch: every gradient is 4x too large (gloo: 'wrong'); found at the loss, stage and
    microbatch named."""
    module = importlib.import_module("pp_schedules")
    _, report = _verify(module.case(2, "1f1b", model=Unscaled), 2)
    assert report.status == "violation"
    f = report.findings[0]
    # at the loss's gradient on the last stage (rank 1), its first microbatch: the schedule's marks
    assert f.kind == "rank-specific-mismatch" and f.rank == [1] and (f.stage, f.microbatch) == (1, 0), f
    assert "in mse" in f.source and "pipeline stage 1, microbatch 0" in f.message, (f.source, f.message)


class Unscaled(importlib.import_module("pp_schedules").ScheduledPipeline):
    """BUG: a mean loss per microbatch with the schedule told not to scale the gradients."""
    scale_grads = False

    def loss_fn(self, inputs):
        return importlib.import_module("pp_schedules").mse

    def total_loss(self, losses):
        return sum(losses) / len(losses)


@pytest.mark.sweep
@pytest.mark.parametrize("schedule", [s for s in SCHEDULES if s != "1f1b"])
def test_pipelining_llama_pp2_verified(schedule):
    """The Llama step (RMSNorm, GQA with RoPE, SwiGLU blocks) under each schedule, one block
    per stage, with PyTorch's default loss (a mean per microbatch, ``scale_grads``): the 1/M
    multiple flows through the norm and attention backward (algebra/scaling.py). Schedule1F1B
    runs in make test (tests/test_pp_scaling.py); the rest here, 30 s to 2 min each."""
    case = importlib.import_module("pp_llama_schedules").case(2, schedule)
    _, report = _verify(case, 2)
    assert report.status == "verified", (report.reason, report.findings[:1])
    assert report.temporal["checked"] and report.temporal["findings"] == 0, report.temporal


@pytest.mark.sweep
def test_pipelining_llama_summed_loss_verified():
    """The other documented form: each microbatch's loss over the whole batch, not scaled."""
    module = importlib.import_module("pp_llama_schedules")
    _, report = _verify(module.case(2, "1f1b", model=module.SummedLoss), 2)
    assert report.status == "verified", (report.reason, report.findings[:1])


class NoShapes(importlib.import_module("pp_schedules").ScheduledPipeline):
    """A stage built without example inputs/outputs: its schedule would infer them at run time."""

    def make_stage(self, stage, example):
        from torch.distributed.pipelining import PipelineStage
        submod = importlib.import_module("mini_pipeline").Stack([self.layers[i] for i in self.stage_layers(stage)])
        return PipelineStage(submod, stage, self.n_stages, torch.device("cpu"))


def test_stage_without_static_shapes_is_inferred():
    """Shape inference (send_object_list of the stages' metadata) is done across the stages
    before capture (tests/test_pp_shape_inference.py); the step verifies."""
    _, report = _verify(importlib.import_module("pp_schedules").case(2, "1f1b", model=NoShapes), 2)
    assert report.status == "verified", (report.reason, report.findings[:1])


# ---------------------------------------------------------------- hand-written interleaved 1F1B

@pytest.fixture(scope="module")
def interleaved():
    case = importlib.import_module("pipeline_mlp_interleaved_1f1b").case(2)
    return _verify(case, 2)


def test_mini_interleaved_1f1b_verified(interleaved):
    """Megatron's interleaved order over two chunks per rank: verified, the virtual stage
    (chunk * pp + stage) and microbatch on every P2P issue, each waited, no temporal finding."""
    prepared, report = interleaved
    assert report.status == "verified", (report.reason, report.findings[:1])
    assert report.temporal["checked"] and report.temporal["findings"] == 0, report.temporal
    for rank, graph in enumerate(prepared.dist.graphs):
        issues = graph.events.p2p()
        assert {e.stage for e in issues} == {rank, rank + 2} and {e.microbatch for e in issues} == set(range(4))
        assert len({e.tag for e in issues if e.op == "irecv"}) == len([e for e in issues if e.op == "irecv"])
    first = [(e.op, e.stage, e.microbatch) for e in prepared.dist.graphs[0].events.p2p()[:3]]
    assert first == [("isend", 0, 0), ("isend", 0, 1), ("irecv", 2, 0)]  # warm-up: two forwards, then chunk 1


@pytest.mark.sweep
def test_mini_interleaved_1f1b_llama_verified():
    """Four Llama blocks, one per virtual stage, Megatron's interleaved 1F1B at pp2."""
    from llama_block import LlamaBlock
    from mini_interleaved import InterleavedPipelineTraining
    case = importlib.import_module("pipeline_mlp_1f1b").case(
        2, model=InterleavedPipelineTraining, name="pipeline_llama_interleaved_1f1b",
        blocks=lambda: [LlamaBlock(16, 4, 2, 32) for _ in range(4)],
        batch=lambda: importlib.import_module("mini_pipeline").regression_batch(4, 4, 16))
    _, report = _verify(case, 2)
    assert report.status == "verified", (report.reason, report.findings[:1])
    assert report.temporal["checked"] and report.temporal["findings"] == 0, report.temporal


# ---------------------------------------------------------------- recv into a buffer autograd saved

def _recv_case(name, world, fresh):
    return importlib.import_module(name).case(world, fresh=fresh)


@pytest.mark.parametrize("name,world,rank,line", [("recv_buffer_reused_while_saved", 2, [1], "dist.recv(buf"),
                                                  ("pipeline_recv_buffer_reused", 3, [1], "batch_isend_irecv")])
def test_recv_into_saved_buffer_found_fresh_twin_verified(name, world, rank, line):
    """Rank 1 receives the next microbatch into the buffer autograd saved for the previous
    one's backward: the temporal check names the receive (rank, source line) and where the
    buffer was saved; its twin with a fresh buffer per receive has no finding."""
    _, report = _verify(_recv_case(name, world, False), world)
    assert report.status == "violation"
    found = [f for f in report.findings if f.kind == "saved-buffer-overwritten"]
    assert found, report.findings
    f = found[0]
    assert f.rank == rank and f.op in ("c10d.recv", "c10d.irecv") and f.source, f
    assert "saved for backward" in f.message and "reused while saved" in f.message
    with open(f.source.split(":")[0]) as src:
        assert line in src.read().splitlines()[int(f.source.split(":")[1].split()[0]) - 1]
    _, twin = _verify(_recv_case(name, world, True), world)
    assert twin.status == "verified", (twin.reason, twin.findings[:1])
    assert twin.temporal["checked"] and twin.temporal["findings"] == 0


def test_saved_buffer_check_is_pure_over_events():
    """The check over hand-made events: a write by a recv to a saved buffer is found; after
    the backward used it (RELEASE) it is not."""
    from shardproof.engine.temporal import buffer_hazards
    from shardproof.ir.events import RELEASE, SAVE, Buffer, Event, RankEvents
    buf = Buffer(1, 0, 16, 4)
    save = Event(rank=0, index=0, kind=SAVE, op="saved for backward", reads=(buf,), handle=1, line="a.py:1")
    recv = Event(rank=0, index=2, kind=ISSUE, op="recv", peer=1, writes=(buf,), line="a.py:2")
    release = Event(rank=0, index=1, kind=RELEASE, op="used by backward", handle=1)
    assert [f.kind for f in buffer_hazards(RankEvents(0, [save, recv]))] == ["saved-buffer-overwritten"]
    assert buffer_hazards(RankEvents(0, [save, release, recv])) == []


# ---------------------------------------------------------------- gloo labels

def _gloo_label(make_case, world: int) -> str:
    """'correct' when every rank's gradients equal the single device's on a real gloo group
    (the schedules run as PyTorch runs them: warm-up vote and all), else 'wrong'."""
    from dataclasses import replace
    case = make_case()
    loss = case.train.loss(case.single(case.inputs["x"]), case.inputs)
    params = dict(case.single.named_parameters())
    single = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))

    def grads(rank, world):
        c = make_case()
        data = c.dist_inputs(rank, world, c.inputs) if c.dist_inputs else dict(c.inputs)
        out = c.distributed(rank, world).train_step(data, {}, replace(c.train, optimizer=None))
        return {n: g.detach().numpy() for n, g in out["grads"].items()}
    ranks = run_fn_on_gloo(grads, world)
    ok = all(np.allclose(r[n], single[n].detach().numpy(), rtol=1e-5, atol=1e-6) for r in ranks for n in single)
    return "correct" if ok else "wrong"


def _schedule_case(schedule, model=None):
    module = importlib.import_module("pp_schedules")
    return lambda: module.case(2, schedule, **({"model": model} if model else {}))


LABELS = [(_schedule_case(s), 2, "correct", s) for s in SCHEDULES] + [
    (lambda: importlib.import_module("pipeline_mlp_interleaved_1f1b").case(2), 2, "correct", "mini interleaved"),
    (_schedule_case("1f1b", Unscaled), 2, "wrong", "1f1b unscaled"),
    (lambda: _recv_case("recv_buffer_reused_while_saved", 2, False), 2, "wrong", "recv reused"),
    (lambda: _recv_case("recv_buffer_reused_while_saved", 2, True), 2, "correct", "recv fresh"),
    (lambda: _recv_case("pipeline_recv_buffer_reused", 3, False), 3, "wrong", "pipeline recv reused"),
    (lambda: _recv_case("pipeline_recv_buffer_reused", 3, True), 3, "correct", "pipeline recv fresh")]


@pytest.mark.parametrize("make,world,label,name", LABELS, ids=[x[-1] for x in LABELS])
def test_gloo_labels(make, world, label, name):
    assert _gloo_label(make, world) == label


@pytest.mark.sweep
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_gloo_labels_llama(schedule):
    """The Llama cases run by PyTorch's schedules on gloo: the whole model's gradients."""
    assert _gloo_label(lambda: importlib.import_module("pp_llama_schedules").case(2, schedule), 2) == "correct"
