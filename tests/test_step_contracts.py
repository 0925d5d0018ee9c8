"""The whole training step by block contracts (issue 16, shardproof.step_blocks): the 8-layer
Llama step (dp2 tp2 M2, AdamW, clipping) proved with its 8 layers as opaque calls whose
meaning is their one distinct block's contract, the tail (loss, accumulation, the dp
all_reduce, clipping, AdamW) traced once, and the proof confirmed by running the real step; a
bug in layer 5's backward (its input gradient never all-reduced over tp) is found in layer 5.
Labels: both steps run on a real gloo group (4 processes) against the single-device gradients."""
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src", "shardproof", "zoo", "train"))

import llama_step  # noqa: E402
from gloo import training_gradients  # noqa: E402
from shardproof.api import NO_CONFIRM  # noqa: E402
from shardproof.step_blocks import verify_step  # noqa: E402

CASES = {"correct": os.path.join(HERE, "cases", "step_llama.py"),
         "layer 5 input gradient unreduced": os.path.join(HERE, "cases", "step_llama_bug5.py")}


def _matches(single: torch.Tensor, local) -> bool:
    """A rank's gradient equals the single-device one, or its chunk along the one dim where
    their shapes differ (a tensor-parallel shard)."""
    local = torch.as_tensor(local)
    if tuple(local.shape) != tuple(single.shape):
        dims = [d for d, (a, b) in enumerate(zip(single.shape, local.shape)) if a != b]
        if len(dims) != 1 or single.shape[dims[0]] % local.shape[dims[0]]:
            return False
        chunks = single.chunk(single.shape[dims[0]] // local.shape[dims[0]], dims[0])
        return any(torch.allclose(c.double(), local.double(), atol=1e-5) for c in chunks)
    return torch.allclose(single.double(), local.double(), atol=1e-5)


def _gloo_correct(path: str) -> bool:
    single, ranks = training_gradients(path, 4)
    return all(isinstance(r, dict) and all(_matches(single[k], v) for k, v in r.items()) for r in ranks)


@pytest.fixture(scope="module")
def correct():
    return verify_step(llama_step.step_case(8), confirm_draws=0)  # confirmed on gloo on the case's own values


@pytest.fixture(scope="module")
def buggy():
    return verify_step(llama_step.step_case(8, buggy_layer=5), confirm_draws=NO_CONFIRM)


@pytest.mark.sweep  # heavy (gloo processes, a full-trace fallback): make test-all
def test_labels_on_gloo():
    assert _gloo_correct(CASES["correct"])
    assert not _gloo_correct(CASES["layer 5 input gradient unreduced"])


def test_step_verified_through_contracts(correct):
    assert correct.status == "verified", correct.reason
    assert correct.confirmation is not None and correct.confirmation.by == "gloo"
    assert correct.blocks["count"] == 8 and correct.blocks["distinct"] == 1
    assert correct.blocks["summary"] == "8 blocks, 1 distinct, proved once"
    assert "fallback" not in correct.blocks and "8 opaque layer calls" in correct.blocks["tail"]
    # every parameter of every layer: its gradient and its AdamW update proved
    params = [f"layers.{i}.{n}.weight" for i in range(8) for n in ("wq", "wo", "attention_norm", "w2")]
    outputs = {o.name: o for o in correct.outputs}
    assert all(outputs[f"grad:{p}"].holds and outputs[f"updated:{p}"].holds for p in params), sorted(outputs)[:6]


def test_bug_in_layer_5_located(buggy):
    assert buggy.status == "violation"
    assert buggy.blocks["count"] == 8 and buggy.blocks["distinct"] == 2
    assert buggy.blocks["layers"] == [0, 0, 0, 0, 0, 1, 0, 0]
    assert buggy.findings and all(f.layer == 5 for f in buggy.findings)
    assert "layer 5" in buggy.reason


@pytest.mark.sweep  # heavy (gloo processes, a full-trace fallback): make test-all
def test_tail_bug_is_not_verified():
    """A bug outside the layers (layer 1's gradients never all-reduced over dp) is in the traced
    tail: the step is not verified (the tail's proof fails, the full trace finds it)."""
    assert not _gloo_correct(os.path.join(HERE, "cases", "step_llama_tail_bug.py"))
    report = verify_step(llama_step.step_case(2, buggy_layer=1, bug="no-dp-reduce"), confirm_draws=NO_CONFIRM)
    assert report.status == "violation"
    assert report.blocks["fallback"].startswith("the tail with the contracts is")  # not proved there either
    assert any("layers.1." in f.message + f.node for f in report.findings), [(f.node, f.message) for f in report.findings]
