"""Pipeline stages without static shapes (issue 18): ``PipelineStage`` given no
``input_args``/``output_args`` has its shapes inferred by the schedule (each stage receiving the
previous stage's output metadata); shardproof runs that exchange across the stages before
capture (frontends/torch_stage_shapes.py). A stack whose blocks change width verifies under
1F1B (one stage per rank) and interleaved 1F1B (two per rank, metadata passed between a rank's
own stages and across ranks both ways); a stage given an input example that disagrees with
what the previous stage sends is an error naming both stages, as PyTorch's own inference
raises on a real gloo group. Labels: every program here run on gloo."""
import importlib
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import run_fn_on_gloo  # noqa: E402
from shardproof.api import InputError, prepare, verify_prepared  # noqa: E402
from shardproof.frontends import torch_stage_shapes  # noqa: E402

MODULE = "pp_inferred_shapes"


def _case(schedule="1f1b", model=None):
    m = importlib.import_module(MODULE)
    return m.case(2, schedule, **({"model": getattr(m, model)} if model else {}))


@pytest.fixture(scope="module")
def one_f_one_b():
    prepared = prepare(_case("1f1b"), 2)
    return prepared, verify_prepared(prepared, fixes=False)


def test_inferred_stages_verified(one_f_one_b):
    prepared, report = one_f_one_b
    assert report.status == "verified", (report.reason, report.findings[:1])
    holds = {o.name: o.holds for o in report.outputs}
    assert holds.pop("loss") == "Replicate()" and set(holds.values()) == {"Replicate()"}, holds
    assert report.temporal["findings"] == 0, report.temporal


def test_p2p_buffers_have_the_inferred_shapes(one_f_one_b):
    """Stage 0 (blocks 4 -> 6 -> 3) sends 3-wide activations; stage 1 receives them, its
    gradients go back 3 wide: the P2P nodes (flat buffers, as PyTorch's P2P sends them) carry
    the inferred 2 x 2 x 3 elements, not the batch's 2 x 2 x 4."""
    prepared, _ = one_f_one_b
    g0, g1 = prepared.dist.graphs
    shapes = lambda g, op: {tuple(n.type.shape) for n in g.nodes if n.op == f"shardproof_p2p.{op}"}  # noqa: E731
    assert shapes(g0, "send") == shapes(g1, "recv") == shapes(g1, "send") == shapes(g0, "recv") == {(12,)}


def test_inference_exchanges_what_pytorch_does():
    """The mailbox holds each boundary's forward metadata (shape, dtype, requires_grad) and the
    gradients' going back, per stage."""
    c = _case("1f1b")
    box = torch_stage_shapes.infer(c.distributed, 2, lambda r: c.dist_inputs(r, 2, c.inputs) if c.dist_inputs
                                   else c.inputs, c.train)
    fwd, bwd = box.posted[(0, 1)], box.posted[(1, 0)]
    assert [tuple(m.shape) for m in fwd.forward_metas] == [(2, 2, 3)] and fwd.forward_metas[0].requires_grad
    assert [tuple(m.shape) for m in bwd.backward_metas] == [(2, 2, 3)]
    assert box.votes == {0: True, 1: True} and [tuple(m.shape) for m in box.meta[1].outputs] == [(2, 2, 2)]


@pytest.mark.sweep
def test_interleaved_inferred_verified():
    """Two stages per rank: stage 0 -> 1 -> 2 -> 3 crosses ranks three times and back."""
    report = verify_prepared(prepare(_case("interleaved_1f1b"), 2), fixes=False)
    assert report.status == "verified", (report.reason, report.findings[:1])


def test_given_input_disagreeing_with_sender_is_an_error():
    with pytest.raises(InputError, match=r"pipeline stage 1: its given inputs disagree with the inferred inputs "
                                         r"\(what stage 0 sends\).*shape mismatch"):
        prepare(_case("1f1b", "WrongInputShape"), 2)


# ---------------------------------------------------------------- labels: real gloo groups

def _gloo_run(schedule, model):
    """Each rank's gradients, or the text of the error its step raised."""
    def grads(rank, world):
        c = _case(schedule, model)
        try:
            out = c.distributed(rank, world).train_step(dict(c.inputs), {}, replace(c.train, optimizer=None))
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"
        return {n: g.detach().numpy() for n, g in out["grads"].items()}
    return run_fn_on_gloo(grads, 2)


@pytest.mark.sweep
@pytest.mark.parametrize("schedule", ["1f1b", "interleaved_1f1b"])
def test_gloo_inferred_correct(schedule):
    c = _case(schedule)
    loss = c.train.loss(c.single(c.inputs["x"]), c.inputs)
    params = dict(c.single.named_parameters())
    single = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
    ranks = _gloo_run(schedule, None)
    assert all(np.allclose(r[n], single[n].numpy(), rtol=1e-5, atol=1e-6) for r in ranks for n in single)


@pytest.mark.sweep
def test_gloo_wrong_input_shape_raises():
    """PyTorch's own inference raises at stage 1 (its given input disagrees with stage 0's)."""
    rank1 = _gloo_run("1f1b", "WrongInputShape")[1]
    assert isinstance(rank1, str) and "Stage 1 input" in rank1 and "shape mismatch" in rank1, rank1
