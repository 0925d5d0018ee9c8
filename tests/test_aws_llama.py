"""AWS transformers-neuronx Llama as XLA HLO: the real Entangle pair (one layer, TP 2,
``../shared/graphs/entangle/aws_llama``) is proved with ``examples/dumps/aws_llama.yaml``,
its broken twin is a violation at the changed slice; at TP 6 (heads and ffn zero-padded,
KV heads repeated) with ``examples/dumps/aws_llama_tp6.yaml``. Generated programs of the
same op sequence (``tests/hlo_llama.py``) at other TP degrees, padded ones included, and
layer counts are proved, agree numerically, and injected bugs are found at the right node."""
import json
import os
import time

import pytest
import yaml

from hlo_llama import llama_agrees, llama_hlo, llama_relations
from shardproof.api import cross_check, prepare_dumps, verify_dumps
from shardproof.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHS = os.environ.get("SHARDPROOF_AWS_LLAMA", os.path.join(ROOT, "..", "shared", "graphs", "entangle", "aws_llama"))
RELATIONS = os.path.join(ROOT, "examples", "dumps", "aws_llama.yaml")
RELATIONS_TP6 = os.path.join(ROOT, "examples", "dumps", "aws_llama_tp6.yaml")
KV_TP6 = "Padded(Shard(2), 2, [[8, 36, 4]])"
real = pytest.mark.skipif(not os.path.isdir(GRAPHS), reason=f"the real dumps are not here ({GRAPHS})")


@pytest.fixture(scope="module")
def real_cli(tmp_path_factory):
    """The real pair and its broken twin, each verified once, through the CLI: {name: (exit
    code, JSON report, seconds)} (the JSON is the report verify_dumps returns; no fix search,
    which a module fixture runs before conftest turns off)."""
    from conftest import validate_report_json
    out, folder = {}, tmp_path_factory.mktemp("aws_llama")
    for name, dist in (("pair", "tp2_layer1"), ("broken", "tp2_layer1.broken")):
        path, t0 = folder / f"{name}.json", time.perf_counter()
        code = main(["verify", "--seq", os.path.join(GRAPHS, "tp1_layer1"), "--dist", os.path.join(GRAPHS, dist),
                     "--relations", RELATIONS, "--no-fix", "--json", str(path)])
        report = json.loads(path.read_text())
        validate_report_json(report)
        out[name] = (code, report, time.perf_counter() - t0)
    return out


@real
def test_real_pair_verified_logits_sharded_by_vocab(real_cli):
    code, report, seconds = real_cli["pair"]
    assert report["status"] == "verified" and report["strength"] == "proof", report["reason"]
    assert {o["name"]: o["holds"] for o in report["outputs"]} == {"out0": "Shard(0)", "out1": "Shard(2)",
                                                                  "out2": "Shard(2)"}
    print(f"aws_llama tp1 vs tp2: import + verify {seconds:.2f} s")


@real
def test_real_broken_pair_is_a_violation_at_the_changed_slice(real_cli):
    code, report, _ = real_cli["broken"]
    assert report["status"] == "violation"
    f = report["findings"][0]
    assert (f["node"], f["op"], f["rank"], f["kind"]) == ("slice.54", "xla.slice", [0, 1], "wrong-shard-offset")
    assert f["source"].startswith("/opt/tiger/transformers-neuronx/src/transformers_neuronx/hlo.py:1935")
    assert "[2048:2560)" in f["message"]


@real
def test_real_pair_with_a_wrong_relation_is_not_verified(tmp_path):
    spec = yaml.safe_load(open(RELATIONS))
    spec["inputs"]["p9.10"] = "Shard(1)"  # the fused QKV is interleaved, not cut in two blocks
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(spec))
    report = verify_dumps(os.path.join(GRAPHS, "tp1_layer1"), os.path.join(GRAPHS, "tp2_layer1"), str(path))
    assert report.status != "verified"


@real
def test_real_pair_cli_exit_codes(real_cli):
    assert real_cli["pair"][0] == 0 and real_cli["broken"][0] == 1


@real
@pytest.mark.slow
@pytest.mark.sweep  # 5-7 min on 2 cores (the execution check of a 2048x128256 head on 6 ranks): make test-all
def test_real_tp6_pair_verified_through_padding_and_repeated_kv_heads():
    """32 query heads padded to 36, 8 KV heads repeated 4 times and padded to 36, ffn 8192
    padded to 8196: the padding is proved harmless (zero rows of o_proj and down_proj, zero
    products), the caches' padded heads proved zero."""
    t0 = time.perf_counter()
    report = verify_dumps(os.path.join(GRAPHS, "tp1_layer1"), os.path.join(GRAPHS, "tp6_layer1"), RELATIONS_TP6)
    assert report.status == "verified" and report.strength == "proof", report.reason
    assert {o.name: o.holds for o in report.outputs} == {"out0": "Shard(0)", "out1": KV_TP6, "out2": KV_TP6}
    print(f"aws_llama tp1 vs tp6: import + verify {time.perf_counter() - t0:.2f} s")


@real
def test_real_tp6_pair_with_unpadded_heads_is_not_verified(tmp_path):
    spec = yaml.safe_load(open(RELATIONS_TP6))
    spec["inputs"]["p10.11"] = "Padded(Shard(1), 1, [[2048, 2304]], unit=32)"  # still fits, but not per head
    spec["inputs"]["p9.10"] = spec["inputs"]["p9.10"].replace("unit=64", "unit=32")
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(spec))
    report = verify_dumps(os.path.join(GRAPHS, "tp1_layer1"), os.path.join(GRAPHS, "tp6_layer1"), str(path))
    assert report.status != "verified"


def _pair(tmp_path, tp, layers, bug=None, **sizes):
    features = {k: sizes.pop(k) for k in ("softmax", "k_bias") if k in sizes}
    rel = llama_relations(layers, tp=tp, **{k: v for k, v in sizes.items()
                                             if k in ("heads", "kv_heads", "head_dim", "ffn", "vocab")})
    seq, dist, path = tmp_path / "seq.hlo", tmp_path / "dist.hlo", tmp_path / "rel.yaml"
    seq.write_text(llama_hlo(1, layers, **sizes, **features))
    dist.write_text(llama_hlo(tp, layers, bug=bug, **sizes, **features))
    path.write_text(yaml.safe_dump(rel))
    return str(seq), str(dist), str(path)


@pytest.mark.parametrize("tp, layers", [(2, 1), (4, 1), (2, 3), (4, 2), (8, 1)])
def test_generated_programs_verified_and_agree_numerically(tmp_path, tp, layers):
    sizes = {"heads": 16, "kv_heads": 8, "hidden": 32, "ffn": 64, "vocab": 48} if tp == 8 else {}
    seq, dist, rel = _pair(tmp_path, tp, layers, **sizes)
    report = verify_dumps(seq, dist, rel)
    assert report.status == "verified", report.reason
    assert cross_check(prepare_dumps(seq, dist, rel)) == []


@pytest.mark.parametrize("bug, node, op, kind", [
    ("k_from_q", "slice.27", "xla.slice", "wrong-shard-offset"),
    ("no_allreduce", "add.94", "aten.add", "partial-sum-never-reduced"),
    # sin and cos swapped: each product is a single-device tensor, their difference is not
    ("rope_swap", "subtract.51", "aten.sub", "value-mismatch"),
])
def test_generated_bugs_are_violations_at_the_node(tmp_path, bug, node, op, kind):
    tp = 4 if bug == "no_allreduce" else 2
    seq, dist, rel = _pair(tmp_path, tp, 1, bug=bug)
    report = verify_dumps(seq, dist, rel)
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == (node, op, list(range(tp)), kind)


@pytest.mark.parametrize("sizes", [dict(vocab=25), dict(vocab=25, ffn=31)])
def test_generated_padded_tp_verified_and_agrees_when_run(tmp_path, sizes):
    """TP 3 over 8 query / 4 KV heads, ffn and vocabulary: everything padded, KV heads repeated
    (the tp6 layout at a size the numerics run at)."""
    assert llama_agrees(3, seed=0, **sizes)  # the label: run, weights padded by hand
    seq, dist, rel = _pair(tmp_path, 3, 1, **sizes)
    report = verify_dumps(seq, dist, rel)
    assert report.status == "verified", report.reason
    assert report.outputs[0].holds == "Padded(Shard(0), 0, [[25, 27]])"
    assert cross_check(prepare_dumps(seq, dist, rel), seeds=(0,)) == []


@pytest.mark.parametrize("feature, node, op", [
    # a softmax across ranks over a padded vocabulary: the padding's exp(0 - max) joins the
    # sum; first seen at the max over the rank's logits, padding included
    ("softmax", "reduce.101", "xla.reduce"),
    # a constant added to every key lane: the caches' padded heads are no longer zero
    ("k_bias", "add.58", "aten.add"),
])
def test_generated_padding_bugs_are_violations_at_the_node(tmp_path, feature, node, op):
    """Correct where tp divides (TP 2: verified, and the run agrees), a bug where it pads
    (TP 3: the run disagrees, and the finding is on the rank holding the padding)."""
    assert llama_agrees(2, seed=0, **{feature: True}) and not llama_agrees(3, seed=0, vocab=25, **{feature: True})
    assert verify_dumps(*_pair(tmp_path, 2, 1, **{feature: True})).status == "verified"
    report = verify_dumps(*_pair(tmp_path, 3, 1, vocab=25, **{feature: True}))
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank) == (node, op, [2])
