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
    assert report.findings  # (the full trace finds it first in the clipping norm, which sums the unreduced squares)


def _rule_setup():
    """A contract table entry for one layer class (x of 8 rows in pieces of 2; one parameter W
    of shape (4, 3), Shard(0) over a tp group of 2) and the terms of X, G, W."""
    import numpy as np
    from shardproof.algebra.layout import Val, full
    from shardproof.algebra.terms import TermStore
    from shardproof.ops import block_calls as bc
    terms = TermStore()
    X = terms.make("input", ("x", "float32"), (), (8, 4, 3))
    W = terms.make("input", ("w", "float32"), (), (4, 3))

    def shard(rank):
        return (np.arange(2 * (rank % 2), 2 * (rank % 2) + 2, dtype=np.int64), None)
    c = bc.CallContract(["block.w"], [(4, 3)], 1, lambda n, r: (None, None, None) if n in ("x", "g") else shard(r),
                        lambda n, r: (None, None, None) if n in ("y", "grad_x") else shard(r), 2, 8, 2)
    rows = np.arange(2, 4, dtype=np.int64)
    good = [[Val(X, (rows, None, None)), Val(W, shard(r))] for r in (0, 1)]
    return bc, terms, c, X, W, good, full, Val, np


def test_opaque_call_rule_applies_only_to_what_the_contract_assumed():
    """The opaque layer call's rule (ops/block_calls.py): the contract's output terms when every
    member holds exactly the assumed relations of the same tensors; otherwise it refuses (the
    engine then answers unknown and the step falls back to its full trace)."""
    bc, terms, c, X, W, good, full, Val, np = _rule_setup()
    bc.CONTRACTS["k"] = c
    try:
        from shardproof.ops.registry import RuleCtx
        ctx = RuleCtx(terms, None, 0, 2)
        y = bc._fwd_rule(ctx, good, "k", 3, 1, (0, 1))
        single = bc._fwd_rule(ctx, [[full(terms, X), full(terms, W)]], "k", 3, 0, (0,))
        assert y[0].t == y[1].t == single[0].t and list(y[0].vecs[0]) == [2, 3]  # the single's y, rows 2-3
        other = terms.make("input", ("x2", "float32"), (), (8, 4, 3))
        refused = {
            "members pass different x": [good[0], [Val(other, good[1][0].vecs), good[1][1]]],
            "rows not one locality piece": [[Val(X, (np.arange(1, 3), None, None)), v[1]] for v in good],
            "W not sharded as assumed": [[v[0], full(terms, W)] for v in good],
            "W of another shape": [[v[0], full(terms, terms.make("input", ("w2", "float32"), (), (2, 3)))]
                                   for v in good],
        }
        for why, vals in refused.items():
            with pytest.raises(bc.NotCovered):
                bc._fwd_rule(ctx, vals, "k", 3, 1, (0, 1))
        with pytest.raises(bc.NotCovered):  # no proved contract of that name
            bc._fwd_rule(ctx, good, "other", 3, 1, (0, 1))
    finally:
        bc.CONTRACTS.pop("k", None)


def test_fallback_to_the_full_trace():
    """A step whose layers' group cannot be found is verified by its full trace, and says so."""
    def no_group(layer):
        raise AttributeError("no tp group")
    report = verify_step(llama_step.step_case(1), group_of=no_group, confirm_draws=NO_CONFIRM)
    assert report.blocks["fallback"].startswith("the layers or their group could not be found")
    assert report.status == "unknown" and report.reason.startswith("proved, but not confirmed")
