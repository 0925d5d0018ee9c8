"""The corpus: megatron-core's own GPT (GQA, SwiGLU, RMSNorm, RoPE; tensor + sequence parallel),
built by the library on each rank (examples/corpus/megatron_gpt.py), verified against the same
library's model at TP 1; a dropped reduce-scatter (layer 0's row-parallel fc2) is a violation
located where the rank's partial sum is used. The labels are facts about PyTorch: test_labels_on_gloo (slow, sweep)
runs both programs on a real gloo group against the single device."""
import os
import sys

import pytest

pytest.importorskip("megatron.core", reason="the megatron-core corpus needs megatron-core (the `corpus` extra)")

from shardproof import api  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "examples", "corpus")
CASE = os.path.join(ROOT, "megatron_gpt.py")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(__file__))

import megatron_gpt  # noqa: E402

BUG = "fc2_not_reduced"


def _verify(world, bug=None):
    case = megatron_gpt.make_case(world, bug)
    return case, api.verify_case(case)


@pytest.fixture(scope="module")
def correct_tp2():
    return _verify(2)


@pytest.fixture(scope="module")
def bug_tp2():
    return _verify(2, BUG)


def _check_correct(report):
    assert report.status == "verified", (report.status, report.reason, report.findings[:1])
    assert [(o.name, o.holds) for o in report.outputs] == [("out", "Shard(2)")]  # vocab-parallel logits
    rel = {k.split(".", 1)[1]: v["relation"] for k, v in report.relations.items() if k.startswith("model.")}
    assert rel["decoder.layers.0.self_attention.linear_qkv.weight"] == "Shard(0)", rel  # column parallel
    assert rel["decoder.layers.0.self_attention.linear_proj.weight"] == "Shard(1)", rel  # row parallel
    assert rel["decoder.layers.1.mlp.linear_fc2.weight"] == "Shard(1)", rel
    assert rel["decoder.layers.0.mlp.linear_fc1.weight"].startswith("Interleaved(0"), rel  # [gate_r; up_r]
    assert rel["embedding.word_embeddings.weight"] == "Shard(0)", rel  # vocab parallel
    assert rel["decoder.layers.0.input_layernorm.weight"] == "Replicate()", rel


def test_megatron_gpt_tp2_verifies(correct_tp2):
    _check_correct(correct_tp2[1])


def _located(case, report):
    """The finding, and whether its partial-sum input comes from the dropped reduce-scatter
    (the chunk in the case file's ``drop_reduction``) through ops that keep a partial sum."""
    assert report.status == "violation", (report.status, report.reason)
    f = report.findings[0]
    assert f.kind == "partial-sum-never-reduced", f
    graph = api.prepare(case).dist.graphs[0]
    by_name = {n.name: n for n in graph.nodes}
    frontier, seen = [by_name[f.node]], set()
    while frontier:
        node = frontier.pop()
        src = str(node.source or "")
        if "megatron_gpt.py" in src and "without_reduce_scatter" in src:
            return f, node
        for a in node.args:
            name = getattr(a, "name", None)
            if name in by_name and name not in seen and by_name[name].op not in ("input", "placeholder"):
                seen.add(name)
                frontier.append(by_name[name])
    return f, None


def test_dropped_reduce_scatter_is_located(bug_tp2):
    case, report = bug_tp2
    f, chunk = _located(case, report)
    # found where the partial sum is first used (layer 1's input RMSNorm), on every rank
    assert f.op == "aten.pow" and f.rank == [0, 1], f
    assert "transformer_layer.py" in f.source and "_forward_attention" in f.source, f  # input_layernorm
    assert 'Partial("sum")' in f.message, f.message
    assert chunk is not None, "the finding's partial input does not come from the dropped reduce-scatter"


@pytest.mark.slow
def test_megatron_gpt_tp4():
    _check_correct(_verify(4)[1])
    case, report = _verify(4, BUG)
    f, chunk = _located(case, report)
    assert f.op == "aten.pow" and f.rank == [0, 1, 2, 3] and chunk is not None, f


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("world", [2, 4])  # TP 4: the dumps make corpus writes beside TP 2
def test_labels_on_gloo(world):
    """On a real gloo group, the correct program's ranks hold the single device's logits (each
    its vocab chunk) and the injected bug's do not."""
    import gloo
    for bug, agrees in (("", True), (BUG, False)):
        diffs = gloo.sharded_differences(CASE, world, 2, {"BUG": bug})
        assert all(d < 1e-4 for d in diffs) == agrees, (bug, diffs)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])  # TP 4: the dumps make corpus writes beside TP 2
def test_dump_pair_verifies_and_bug_is_a_violation(tmp_path, monkeypatch, world):
    """The generator's readable FX dumps (make corpus) at TP 2 and 4, with the relations file it
    writes beside them: verified, and the dropped reduce-scatter a violation."""
    import dump_libraries
    monkeypatch.setattr(dump_libraries, "WORLDS", (world,))
    dump_libraries.dump_case("megatron_gpt", BUG, str(tmp_path))
    root, tp = tmp_path / "megatron_gpt", f"tp{world}"
    ok = api.verify_dumps(str(root / "tp1"), str(root / tp), str(root / f"{tp}.yaml"), auto_relations=True)
    assert ok.status == "verified", (ok.status, ok.reason)
    bad = api.verify_dumps(str(root / "tp1"), str(root / f"{tp}.bug"), str(root / f"{tp}.bug.yaml"),
                           auto_relations=True)
    assert bad.status == "violation", (bad.status, bad.reason)
    assert bad.findings[0].kind == "partial-sum-never-reduced", bad.findings[0]
