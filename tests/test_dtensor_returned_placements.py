"""A DTensor training step that returns its gradients as DTensor gives them -- a sequence-
parallel norm's as Partial("sum"), a vocab-parallel embedding's as Replicate() while the
parameter is Shard(0) -- is judged by those placements (the local tensors sum to / each
equal / are the chunks of the single-device gradient), not by the parameter's. A returned
DTensor whose local values do not fit its placements stays a violation. Labels: each step
run on gloo, its gradients' ``full_tensor()`` compared with the single-device ones."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gloo import run_fn_on_gloo
from shardproof import Case, Train
from shardproof.api import prepare, verify_prepared

VOCAB, HIDDEN, FFN, SEQ, WORLD = 8, 4, 8, 6, 2


class NormMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.w1 = nn.Linear(HIDDEN, FFN)
        self.w2 = nn.Linear(FFN, HIDDEN)

    def forward(self, tokens):
        return self.w2(F.relu(self.w1(self.norm(self.embed(tokens)))))


def sq_loss(out, inputs):
    return ((out - inputs["y"]) ** 2).mean()


def _full_model():
    torch.manual_seed(0)
    return NormMLP()


def _inputs():
    g = torch.Generator().manual_seed(1)
    return {"tokens": torch.randint(0, VOCAB, (SEQ,), generator=g), "y": torch.randn(SEQ, HIDDEN, generator=g)}


def mislabel(grad):
    """The bug: a gradient's Partial local values stated as Replicate() (run_check=False)."""
    from torch.distributed.tensor import DTensor, Replicate
    return DTensor.from_local(grad.to_local(), grad.device_mesh, [Replicate()], run_check=False)


class TPNormMLP(nn.Module):
    """NormMLP parallelized by DTensor: vocab-parallel embedding, sequence-parallel norm,
    column/row-parallel MLP; `train_step` returns the gradients as DTensor gives them."""

    def __init__(self, full: NormMLP, world: int, bug: bool = False):
        super().__init__()
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                       parallelize_module)
        mesh = init_device_mesh("cpu", (world,))
        self.model = parallelize_module(copy.deepcopy(full), mesh, {
            "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
            "norm": SequenceParallel(sequence_dim=0),
            "w1": ColwiseParallel(input_layouts=Shard(0)),
            "w2": RowwiseParallel(output_layouts=Replicate()),
        })
        self.bug = bug

    def forward(self, tokens):
        return self.model(tokens)

    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        loss = sq_loss(self(inputs["tokens"]), inputs)
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        if self.bug:
            grads["model.norm.weight"] = mislabel(grads["model.norm.weight"])
        return {"loss": loss, "grads": grads}


def make_case(bug: bool = False) -> Case:
    full = _full_model()
    return Case(single=full, distributed=lambda rank, world: TPNormMLP(full, world, bug), inputs=_inputs(),
                world_size=WORLD, train=Train(loss=sq_loss), name="dtensor_norm_mlp" + ("_mislabelled" if bug else ""))


def _single_grads() -> dict:
    model = _full_model()
    loss = sq_loss(model(_inputs()["tokens"]), _inputs())
    params = dict(model.named_parameters())
    return {n: g.detach().numpy() for n, g in zip(params, torch.autograd.grad(loss, list(params.values())))}


def _gloo_grads(rank: int, world: int, bug: bool) -> dict:
    program = TPNormMLP(_full_model(), world, bug)
    out = program.train_step(_inputs(), {}, None)
    return {n.removeprefix("model."): (g.full_tensor().detach().numpy(), str(tuple(g.placements)))
            for n, g in out["grads"].items()}


def gloo_label(bug: bool) -> tuple[bool, dict]:
    """(whether every returned gradient's full value is the single-device one, on every
    rank; each gradient's placements on rank 0)."""
    ranks = run_fn_on_gloo(lambda rank, world: _gloo_grads(rank, world, bug), WORLD)
    want = _single_grads()
    ok = all(np.allclose(r[n][0], want[n], atol=1e-5) for r in ranks for n in want)
    return ok, {n: p for n, (_, p) in ranks[0].items()}


@pytest.fixture(scope="module")
def labels():
    return {bug: gloo_label(bug) for bug in (False, True)}


def test_gloo_labels_and_placements(labels):
    ok, placements = labels[False]
    assert ok, "the correct step's gradients are the single-device ones on gloo"
    assert "Partial(sum)" in placements["norm.weight"] and "Replicate()" in placements["embed.weight"], placements
    assert not labels[True][0], "the mislabelled gradient's full_tensor() differs on gloo"


def test_returned_placements_verified(labels):
    assert labels[False][0]
    p = prepare(make_case(), WORLD)
    assert str(p.expect["grad:norm.weight"]) == 'Partial("sum")'
    assert str(p.expect["grad:embed.weight"]) == "Replicate()"
    assert str(p.expect["grad:w1.weight"]) == "Shard(0)"
    report = verify_prepared(p)
    assert report.status == "verified", (report.reason, [f.message for f in report.findings])
    rows = {r["parameter"].split(" (of ")[-1].rstrip(")"): r for r in report.parameters}
    assert rows["embed.weight"]["relation"] == "Shard(0)" and rows["embed.weight"]["gradient"] == "Replicate()"
    assert rows["embed.weight"].get("stated") == ["grad"] and rows["norm.weight"].get("stated") == ["grad"]
    assert "stated" not in rows["w1.weight"]  # returned as its parameter is laid out


def test_local_values_not_fitting_placements_violation(labels):
    assert not labels[True][0]
    p = prepare(make_case(bug=True), WORLD)
    assert str(p.expect["grad:norm.weight"]) == "Replicate()"  # as the step states it
    report = verify_prepared(p)
    assert report.status == "violation", (report.status, report.reason)
    broken = {c.name for c in report.outputs if c.holds is None}
    assert "grad:norm.weight" in broken, report.outputs
    assert "grad:norm.bias" not in broken and "grad:embed.weight" not in broken, broken
    assert report.findings, "a violation names where it was found"


def _mapping(rank: int, world: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard
    from shardproof.frontends.torch_placements import stated_relation
    mesh = init_device_mesh("cpu", (world,))
    cases = {"R": [Replicate()], "S1": [Shard(1)], "Psum": [Partial()], "Pavg": [Partial("avg")],
             "Pmax": [Partial("max")], "strided": [_StridedShard(0, split_factor=2)]}
    return {k: str(stated_relation(mesh, p)) for k, p in cases.items()}


def test_placements_read_exactly_or_not_at_all():
    """Each placement as the relation DTensor means by it; a strided shard (another chunk
    order) is not read as any relation (judged as before, never guessed)."""
    got = run_fn_on_gloo(_mapping, WORLD)[0]
    assert got == {"R": "Replicate()", "S1": "Shard(1)", "Psum": 'Partial("sum")', "Pavg": 'Partial("avg")',
                   "Pmax": 'Partial("max")', "strided": "None"}, got
