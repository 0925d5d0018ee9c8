"""Block contracts over a layer stack (issue 16): 8 Llama blocks on tp2, each layer's forward
and backward captured alone, identical layers proved once and the contracts chained; a
changed layer (5 of 8: its MLP output never all-reduced) is its own block, found and located.
Labels: both stacks run whole on a real gloo group against the single-device stack."""
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src", "shardproof", "zoo", "train"))

import llama_layers as L  # noqa: E402
from gloo import run_on_gloo  # noqa: E402
from shardproof.blocks import verify_blocks  # noqa: E402
from shardproof.engine import blocks as eb  # noqa: E402
from shardproof.engine.result import Report  # noqa: E402

CASE = os.path.join(HERE, "cases", "blocks_stack.py")
PROGRAMS = {"correct": {}, "layer 5 without reduce": {"buggy_layer": 5},
            "layer 3 wrong slice": {"n_layers": 4, "buggy_layer": 3, "bug": "wrong-slice"}}


def _stack(buggy_layer=None, confirm_draws=-1, n_layers=8, bug="no-reduce"):
    torch.manual_seed(0)
    layers = L.full_layers(n_layers)
    x, g = torch.randn(L.ROWS, L.SEQ, L.HIDDEN), torch.randn(L.ROWS, L.SEQ, L.HIDDEN)
    return verify_blocks(layers, L.parallel_layer(buggy_layer, bug), x, g, 2, name=f"llama{n_layers}",
                         confirm_draws=confirm_draws)


@pytest.fixture(scope="module")
def correct():
    return _stack(confirm_draws=0)  # the proof confirmed on gloo on the case's own values


@pytest.fixture(scope="module")
def buggy():
    return _stack(buggy_layer=5)


def test_labels_on_gloo():
    """Each stack run whole on a real gloo group (one spawn for the three): the worst
    |rank - single| of its output and input gradient."""
    worst = {name: max(float((r[k].double() - single[k].double()).abs().max()) for r in ranks for k in ("y", "grad_x"))
             for name, (single, ranks) in zip(PROGRAMS, run_on_gloo(CASE, list(PROGRAMS.values()), 2, seed=None))}
    assert worst["correct"] < 1e-5, worst
    assert worst["layer 5 without reduce"] > 1e-3 and worst["layer 3 wrong slice"] > 1e-3, worst


def test_eight_identical_blocks_proved_once(correct):
    assert correct.status == "verified", correct
    assert correct.blocks["summary"] == "8 blocks, 1 distinct, proved once"
    assert correct.blocks["layers"] == [0] * 8 and correct.blocks["proofs"] == 1
    assert correct.confirmation.outcome == "confirmed"
    (contract,) = correct.blocks["contracts"]
    # the contract is what the engine proved: y and grad_x replicated (they feed the neighbours
    # as the contract assumes), the column-parallel weights' gradients Shard(0), the row-parallel Shard(1)
    assert contract["outputs"]["y"] == contract["inputs"]["x"] == "Replicate()"
    assert contract["outputs"]["grad_x"] == contract["inputs"]["g"] == "Replicate()"
    assert contract["outputs"]["grad:block.wq.weight"] == "Shard(0)"
    assert contract["outputs"]["grad:block.w2.weight"] == "Shard(1)"
    assert contract["outputs"]["grad:block.ffn_norm.weight"] == "Replicate()"


def test_changed_layer_is_found_and_located(buggy):
    assert buggy.status == "violation", buggy
    assert buggy.blocks["distinct"] == 2 and buggy.blocks["layers"] == [0, 0, 0, 0, 0, 1, 0, 0]
    first = buggy.findings[0]
    assert first.layer == 5 and first.kind == "partial-sum-never-reduced"
    # the residual add that reads the MLP's partial output
    assert first.op == "aten.add" and "llama_block.py" in first.source
    statuses = {tuple(c["layers"]): c["status"] for c in buggy.blocks["contracts"]}
    assert statuses[(5,)] == "violation" and statuses[(0, 1, 2, 3, 4, 6, 7)] != "violation"
    assert "layer 5" in buggy.reason and buggy.to_json()["findings"][0]["layer"] == 5


def test_same_code_other_weights_is_its_own_block():
    """Layer 3 runs the same ops as the others but holds another rank's wq: blocks are equal
    only if their input relations are too, so it gets its own proof, which fails there."""
    report = _stack(buggy_layer=3, n_layers=4, bug="wrong-slice")
    assert report.status == "violation", report
    assert report.blocks["layers"] == [0, 0, 0, 1]
    assert report.findings[0].layer == 3
    (bad,) = [c for c in report.blocks["contracts"] if c["layers"] == [3]]
    assert bad["structure"] == report.blocks["contracts"][0]["structure"]  # the same program structure


def _contract(key, layers, y="Replicate()", grad_x="Replicate()"):
    return eb.Contract(key, layers, {"x": "Replicate()", "g": "Replicate()"}, {"y": y, "grad_x": grad_x},
                       Report("unknown", 2, reason="proved, but not confirmed by execution: not run"))


def test_contracts_that_do_not_chain_are_unknown():
    """A block whose proved output is not what the next block assumes breaks the chain."""
    a, b = _contract("a", [0, 2]), _contract("b", [1], y='Partial("sum")')
    broken = eb.chain(["a", "b", "a"], {"a": a, "b": b}, {"x": "Replicate()", "g": "Replicate()"})
    assert [layer for layer, _ in broken] == [2]
    report = eb.combine(["a", "b", "a"], {"a": a, "b": b}, {"x": "Replicate()", "g": "Replicate()"})
    assert report.status == "unknown" and "do not chain" in report.reason
    fine = eb.combine(["a", "a"], {"a": _contract("a", [0, 1])}, {"x": "Replicate()", "g": "Replicate()"})
    assert fine.status == "unknown" and fine.reason.startswith("proved, but not confirmed")
    assert fine.blocks["summary"] == "2 blocks, 1 distinct, proved once"


def test_terminal_says_which_layers_share_a_proof(buggy):
    from rich.console import Console
    from shardproof.report.terminal import render
    console = Console(record=True, width=200)
    render(buggy, console)
    text = console.export_text()
    assert "8 blocks, 2 distinct, proved 2 times: layers 0, 1, 2, 3, 4, 6, 7: " in text
    assert "layers 5: violation" in text


def test_screening_never_equates_what_it_cannot_see():
    """Outside screening(), an in-place all_reduce carries its process group as an opaque
    object: two runs of the same program then never share a class (no false 'identical')."""
    from shardproof.frontends.torch_blocks import dispatch_text, screening
    from shardproof.frontends.torch_capture import fake_world

    class Reduce(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            torch.distributed.all_reduce(y)
            return y
    x = torch.ones(2)
    with fake_world(0, 2):
        assert dispatch_text(Reduce(), {"x": x}) != dispatch_text(Reduce(), {"x": x})
        with screening():  # routed as during capture: the group by name and members
            seen = dispatch_text(Reduce(), {"x": x})
            assert seen == dispatch_text(Reduce(), {"x": x}) and "(0, 1)" in seen
