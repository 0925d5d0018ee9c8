"""A Llama layer stack proved at real sizes on fake tensors (no values) from stated relations,
and confirmed by execution at reduced widths with the same structure (issue 16,
shardproof.blocks_shapes). Real sizes: the Llama-3-8B block (hidden 4096, 32 heads, 8 KV heads,
ffn 14336) at tp2, on fake tensors; reduced: the same heads, KV heads, tp and code at head_dim 4.
Labels: the same stacks (same code, same tp, the bug in the same layer) run whole on a real gloo
group against the single-device stack (test_labels_on_gloo)."""
import contextlib
import os
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src", "shardproof", "zoo", "train"))

import llama_layers as L  # noqa: E402
from gloo import run_on_gloo  # noqa: E402
from shardproof.blocks_shapes import prepare_stated, verify_blocks_at_shapes  # noqa: E402
from shardproof.relations.spec import RelationError  # noqa: E402

TP, SEQ = 2, 4
REAL = dict(hidden=4096, heads=32, kv_heads=8, ffn=14336)
REDUCED = dict(hidden=128, heads=32, kv_heads=8, ffn=64)  # head_dim 4: the same heads, KV heads, tp
CASE = os.path.join(HERE, "cases", "blocks_stack.py")


def _fake(n_layers, mode):
    with mode:
        layers = L.full_layers(n_layers, **REAL)
        return layers, (torch.randn(1, SEQ, REAL["hidden"]), torch.randn(1, SEQ, REAL["hidden"]))


def _reduced(n_layers):
    torch.manual_seed(0)
    layers = L.full_layers(n_layers, **REDUCED)
    return layers, (torch.randn(1, SEQ, REDUCED["hidden"]), torch.randn(1, SEQ, REDUCED["hidden"]))


def _stack(n_layers, buggy_layer=None, bug="no-reduce"):
    mode = FakeTensorMode()
    real, real_data = _fake(n_layers, mode)
    reduced, reduced_data = _reduced(n_layers)
    return verify_blocks_at_shapes(real, reduced, L.parallel_layer(buggy_layer, bug), real_data, reduced_data, TP,
                                   L.TP_RELATIONS, f"llama{n_layers}", mode, confirm_draws=0,
                                   sizes=("hidden 4096, ffn 14336", "hidden 128, ffn 64"))


@pytest.fixture(scope="module")
def correct():
    return _stack(2)


@pytest.mark.slow
def test_labels_on_gloo():
    """The same code at tp2 run whole on gloo: correct agrees, the layer-4 bug does not."""
    runs = run_on_gloo(CASE, [{"n_layers": 6}, {"n_layers": 6, "buggy_layer": 4}], TP, seed=None)
    worst = [max(float((r[k].double() - single[k].double()).abs().max()) for r in ranks for k in ("y", "grad_x"))
             for single, ranks in runs]
    assert worst[0] < 1e-5 and worst[1] > 1e-3, worst


def test_proved_at_real_sizes_confirmed_at_reduced_widths(correct):
    assert correct.status == "verified", correct.reason
    assert correct.blocks["summary"] == "2 blocks, 1 distinct, proved once"
    shapes = correct.blocks["shapes"]
    assert shapes["matched"] and shapes["proved"] == "hidden 4096, ffn 14336"
    assert "proved at real shapes" in shapes["statement"] and "confirmed by execution at reduced widths" in \
        shapes["statement"]
    assert correct.confirmation.outcome == "confirmed" and "at reduced widths" in correct.confirmation.detail
    (contract,) = correct.blocks["contracts"]
    assert contract["outputs"]["grad:block.wq.weight"] == "Shard(0)"
    assert contract["outputs"]["grad:block.w2.weight"] == "Shard(1)"
    assert contract["outputs"]["y"] == contract["outputs"]["grad_x"] == "Replicate()"
    assert all(r["how"] == "given" for r in correct.relations.values())  # stated, none matched by value


def test_the_proof_needs_no_values():
    """Captured on fake tensors, every input related as stated; an input not stated is an error."""
    mode = FakeTensorMode()
    (layer,), (x, g) = _fake(1, mode)
    make = L.parallel_layer()
    p = prepare_stated(layer, lambda r, w: make(0, layer, r, w), x, g, TP, "one", L.TP_RELATIONS, mode)
    assert p.seq.inputs[-1].shape == (1, SEQ, REAL["hidden"]) and p.examples == {}
    partial = {k: v for k, v in L.TP_RELATIONS.items() if k != "block.wo.weight"}
    with pytest.raises(RelationError, match="block.wo.weight"):
        prepare_stated(layer, lambda r, w: make(0, layer, r, w), x, g, TP, "one", partial, mode)


def test_bug_in_one_layer_of_six_is_located_at_real_sizes():
    report = _stack(6, buggy_layer=4)
    assert report.status == "violation"
    assert report.blocks["summary"].startswith("6 blocks, 2 distinct")
    assert report.findings[0].layer == 4 and report.findings[0].kind == "partial-sum-never-reduced"
    assert not report.blocks["shapes"]["matched"]


def test_a_stated_slice_the_values_contradict_is_not_verified():
    """wq loaded from the next rank's slice: the graphs equal the correct ones (the real-size
    proof holds of what was stated), but at reduced widths the values refute the statement."""
    report = _stack(2, buggy_layer=1, bug="wrong-slice")
    assert report.status == "unknown" and "proved at real shapes; not confirmed" in report.reason
    assert "block.wq.weight" in report.reason


@pytest.mark.sweep
def test_405b_sizes_tp8_sequence_8192():
    """bench/llama405b.py's stack at the real Llama-3-405B block sizes (hidden 16384, 128 heads,
    8 KV heads, ffn 53248, sequence 8192, tp8), 3 layers: proved on fake tensors, confirmed at
    reduced widths (hidden 512) on gloo."""
    sys.path.insert(0, os.path.join(HERE, "..", "bench"))
    import llama405b
    report = llama405b.stack(3, 8192)
    assert report.status == "verified", report.reason
    assert report.blocks["summary"] == "3 blocks, 1 distinct, proved once" and report.blocks["shapes"]["matched"]


def test_screening_tells_constants_apart():
    """Two layers differing only in a constant tensor made in forward (``torch.tensor(c)``) are
    different blocks, on real and on fake tensors (the constant's values are recorded)."""
    from shardproof.frontends.torch_blocks import dispatch_text, screening

    class Scale(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c

        def forward(self, x):
            return x * torch.tensor(self.c)
    mode = FakeTensorMode()
    for x, within in ((torch.ones(2), contextlib.nullcontext()), (mode.from_tensor(torch.ones(2)), mode)):
        with screening(), within:
            texts = [dispatch_text(Scale(c), {"x": x}) for c in (2.0, 3.0, 2.0)]
        assert texts[0] != texts[1] and texts[0] == texts[2]
