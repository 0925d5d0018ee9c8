"""AWS transformers-neuronx Llama as XLA HLO: the real Entangle pair (one layer, TP 2,
``../shared/graphs/entangle/aws_llama``) is proved with ``examples/dumps/aws_llama.yaml``,
its broken twin is a violation at the changed slice; generated programs of the same op
sequence (``tests/hlo_llama.py``) at other TP degrees and layer counts are proved, agree
numerically, and injected bugs are found at the right node."""
import os
import time

import pytest
import yaml

from hlo_llama import llama_hlo, llama_relations
from shardproof.api import cross_check, prepare_dumps, verify_dumps
from shardproof.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHS = os.path.join(ROOT, "..", "shared", "graphs", "entangle", "aws_llama")
RELATIONS = os.path.join(ROOT, "examples", "dumps", "aws_llama.yaml")
real = pytest.mark.skipif(not os.path.isdir(GRAPHS), reason=f"the real dumps are not here ({GRAPHS})")


@real
def test_real_pair_verified_logits_sharded_by_vocab():
    t0 = time.perf_counter()
    report = verify_dumps(os.path.join(GRAPHS, "tp1_layer1"), os.path.join(GRAPHS, "tp2_layer1"), RELATIONS)
    seconds = time.perf_counter() - t0
    assert report.status == "verified" and report.strength == "proof", report.reason
    assert {o.name: o.holds for o in report.outputs} == {"out0": "Shard(0)", "out1": "Shard(2)", "out2": "Shard(2)"}
    print(f"aws_llama tp1 vs tp2: import + verify {seconds:.2f} s")


@real
def test_real_broken_pair_is_a_violation_at_the_changed_slice():
    report = verify_dumps(os.path.join(GRAPHS, "tp1_layer1"), os.path.join(GRAPHS, "tp2_layer1.broken"), RELATIONS)
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("slice.54", "xla.slice", [0, 1], "wrong-shard-offset")
    assert f.source.startswith("/opt/tiger/transformers-neuronx/src/transformers_neuronx/hlo.py:1935")
    assert "[2048:2560)" in f.message


@real
def test_real_pair_with_a_wrong_relation_is_not_verified(tmp_path):
    spec = yaml.safe_load(open(RELATIONS))
    spec["inputs"]["p9.10"] = "Shard(1)"  # the fused QKV is interleaved, not cut in two blocks
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(spec))
    report = verify_dumps(os.path.join(GRAPHS, "tp1_layer1"), os.path.join(GRAPHS, "tp2_layer1"), str(path))
    assert report.status != "verified"


@real
def test_real_pair_cli_exit_codes(capsys):
    seq = os.path.join(GRAPHS, "tp1_layer1")
    assert main(["verify", "--seq", seq, "--dist", os.path.join(GRAPHS, "tp2_layer1"), "--relations", RELATIONS]) == 0
    assert main(["verify", "--seq", seq, "--dist", os.path.join(GRAPHS, "tp2_layer1.broken"),
                 "--relations", RELATIONS]) == 1
    capsys.readouterr()


def _pair(tmp_path, tp, layers, bug=None, **sizes):
    rel = llama_relations(layers, **{k: v for k, v in sizes.items() if k in ("heads", "kv_heads", "head_dim")})
    seq, dist, path = tmp_path / "seq.hlo", tmp_path / "dist.hlo", tmp_path / "rel.yaml"
    seq.write_text(llama_hlo(1, layers, **sizes))
    dist.write_text(llama_hlo(tp, layers, bug=bug, **sizes))
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
