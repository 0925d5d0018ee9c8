"""The corpus: torchtitan's own Llama 3 (GQA with a fused wqkv, SwiGLU, complex RoPE) parallelized
by torchtitan itself (TP + SP, vocab-sharded logits), examples/corpus/torchtitan_llama.py.

Labels (facts about PyTorch, test_label_on_gloo: slow, sweep): on a real gloo group the TP program (its
``partial_dtensor`` backend) holds the single device's logits, each rank its vocab chunk.
Where the engine stands: verified at TP 2 (in make test, ~10 s with the import) and TP 4 (slow):
torchtitan's vocab-parallel embedding (ids clamped into the rank's block, the lookup multiplied
by the in-block mask: the clamp-and-mask lemma of algebra/masks.py), the reduce-scatter into
sequence shards, RMSNorm, the all-gather, the colwise fused wqkv, complex RoPE
(``view_as_complex`` / ``view_as_real``) and grouped-query attention over heads of the fused
projection (ops/sdpa_reuse.py)."""
import os
import sys

import pytest

pytest.importorskip("triton", reason="torchtitan 0.3.0 imports triton unconditionally (the `corpus` extra)")
pytest.importorskip("torchtitan.models.llama3", reason="the torchtitan corpus needs torchtitan, spmd_types, tyro")

from shardproof import api  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "examples", "corpus")
CASE = os.path.join(ROOT, "torchtitan_llama.py")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(__file__))

import torchtitan_llama  # noqa: E402


def _check(report):
    assert report.status == "verified", (report.findings[:1], report.reason)  # the program is correct (gloo)
    rel = {k.split(".", 1)[1]: v["relation"] for k, v in report.relations.items() if k.startswith("model.")}
    assert rel["layers.0.attention.qkv_linear.wqkv.weight"] == "Shard(0)", rel  # torchtitan's colwise wqkv
    assert rel["layers.0.attention.wo.weight"] == "Shard(1)", rel
    assert rel["tok_embeddings.weight"] == "Shard(0)", rel
    assert [(o.name, o.holds) for o in report.outputs] == [("out", "Shard(2)")]


def test_torchtitan_llama_tp2():
    _check(api.verify_case(torchtitan_llama.make_case(2)))


@pytest.mark.slow
def test_torchtitan_llama_tp4():
    _check(api.verify_case(torchtitan_llama.make_case(4)))


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("world", [2, 4])
def test_label_on_gloo(world):
    """The correct program's ranks hold the single device's logits on a real gloo group."""
    import gloo
    diffs = gloo.sharded_differences(CASE, world, 2)
    assert all(d < 1e-4 for d in diffs), diffs
