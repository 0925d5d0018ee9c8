"""Soundness classes 5 and 7 of issue 14: relations inferred by value never pick one of
several layouts the values fit, and assumptions on input values are checked against the
example inputs. Every buggy/correct label is a fact about PyTorch: the programs run on a
real gloo process group (tests/gloo.py) against the single-device program, with the
single-device weights redrawn to distinct values before the ranks are built."""
import os

import numpy as np
import pytest

from conftest import ROOT
from shardproof.engine.assumptions import VALID_INDICES, input_breaches
from shardproof.ir.graph import Graph, Node, TensorType
from shardproof.relations.infer import candidate_relations, infer_by_value
from shardproof.relations.spec import RelationError, Shard, Slices

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import build_case, outputs_agree, run_on_gloo  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402

CASES = os.path.join(ROOT, "tests", "cases", "soundness")
LOADER = os.path.join(CASES, "loader_mlp.py")
CE = os.path.join(CASES, "ignore_index_ce.py")
BUFFER = os.path.join(CASES, "recomputed_buffer.py")
WORLDS = (2, 4)

LOADERS = [dict(), dict(loader="block0"), dict(loader="next"), dict(loader="transposed"),
           dict(zero_bias=True), dict(zero_bias=True, bias_loader="block0"), dict(zero_bias=True, bias_loader="next")]
BUFFERS = [dict(), dict(wrong=True)]
CE_CONFIGS = [dict(form=f, variant=v, ignored=i) for f, vs in (("vocab", ("masked", "mishandled")),
                                                               ("tokens", ("global_count", "mean_of_means")))
              for v in vs for i in ("none", "middle", "boundary")]


def _key(config: dict) -> tuple:
    return tuple(sorted(config.items()))


@pytest.fixture(scope="module")
def labels():
    """(case file, world, config) -> whether every rank's output equals the single-device one on gloo."""
    out = {}
    # the recomputed table is the program's own constant: run as the user wrote it (no redraw)
    for path, configs, seed in ((LOADER, LOADERS, 1), (CE, CE_CONFIGS, 1), (BUFFER, BUFFERS, None)):
        for world in WORLDS:
            for config, (single, ranks) in zip(configs, run_on_gloo(path, configs, world, seed)):
                out[path, world, _key(config)] = outputs_agree(single, ranks)
    return out


def _verify(path: str, world: int, config: dict, relations: dict | None = None):
    case = build_case(path, world, config, seed=None)
    if relations:
        case.relations = relations
    p = prepare(case, world)
    return p, verify_prepared(p)


# ---------------------------------------------------------------- class 5: loaders

@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("config", LOADERS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "block")
def test_loader_verdict_follows_execution(labels, world, config):
    correct = labels[LOADER, world, _key(config)]
    if config.get("loader") == "transposed":  # a transposed block is no piece of the weight: no relation
        assert not correct
        with pytest.raises(RelationError, match="no relation found for distributed input.*w1"):
            _verify(LOADER, world, config)
        return
    p, report = _verify(LOADER, world, config)
    assert all(b.how == "value" for b in p.bindings.values())  # the ranks were built from the redrawn weights
    if correct:
        assert report.status == "verified", (report.reason, report.findings)
        return
    assert report.status == "violation", (report.status, report.reason)
    f = report.findings[0]
    # a wrong block of fc1's weight meets fc2's block r in the row-parallel product; a wrong
    # block of fc1's bias meets fc1's output block in fc1's own linear (addmm)
    wrong_bias = config.get("bias_loader") not in (None, "block")
    assert f.op == ("aten.addmm" if wrong_bias and "loader" not in config else "aten.mm"), f
    assert f.rank and f.kind in ("wrong-shard-offset", "wrong-dim"), f  # (a swapped bias reads as wrong-dim)


@pytest.mark.parametrize("world", WORLDS)
def test_prebuilt_zero_bias_is_ambiguous_until_stated(labels, world):
    """Programs built before the redraw hold the original weights: relations fall back to
    them (said so); a zero bias fits every block, so inference stops with the candidates."""
    for config in (dict(zero_bias=True, prebuilt=True), dict(zero_bias=True, bias_loader="block0", prebuilt=True)):
        with pytest.raises(RelationError) as exc:
            _verify(LOADER, world, config)
        msg = str(exc.value)
        assert "ambiguous" in msg and "b1" in msg and "Shard(0)" in msg and "Slices(0, {0: (0," in msg, msg
        assert "relations=" in msg and "inputs:" in msg, msg
    p, report = _verify(LOADER, world, dict(zero_bias=True, prebuilt=True), {"b1": "Shard(0) of fc1.bias"})
    assert report.status == "verified" and p.bindings["w1"].how == "value (original weights)"


@pytest.mark.parametrize("world", WORLDS)
def test_prebuilt_programs_relate_by_the_original_weights(labels, world):
    p, report = _verify(LOADER, world, dict(prebuilt=True))
    assert report.status == "verified" and p.bindings["w1"].how == "value (original weights)"
    assert not labels[LOADER, world, _key(dict(loader="next"))]
    _, report = _verify(LOADER, world, dict(loader="next", prebuilt=True))
    assert report.status == "violation" and report.findings[0].op == "aten.mm"


@pytest.mark.parametrize("world", WORLDS)
def test_a_recomputed_buffer_relates_as_a_constant(labels, world):
    """The rank recomputes the table (no copy of the redrawn one): related by the original
    values; recomputed wrongly, it relates to nothing (exit 3), never verified."""
    assert labels[BUFFER, world, _key(dict())] and not labels[BUFFER, world, _key(dict(wrong=True))]
    p, report = _verify(BUFFER, world, dict())
    assert report.status == "verified" and p.bindings["table"].how == "value (original weights)"
    with pytest.raises(RelationError, match="no relation found for distributed input.*table"):
        _verify(BUFFER, world, dict(wrong=True))


def test_a_relation_stated_in_yaml_settles_an_ambiguous_one(tmp_path):
    f = tmp_path / "rel.yaml"
    f.write_text("inputs:\n  b1: Shard(0) of fc1.bias\n")
    p = prepare(build_case(LOADER, 2, dict(zero_bias=True, prebuilt=True), seed=None), 2, relations_file=str(f))
    assert verify_prepared(p).status == "verified" and p.bindings["b1"].how == "given"


def test_a_stated_relation_must_hold_for_the_values(labels):
    assert not labels[LOADER, 2, _key(dict(loader="block0"))]
    with pytest.raises(RelationError, match="stated relation Shard\\(0\\) for 'w1' does not hold.*Slices"):
        _verify(LOADER, 2, dict(loader="block0"), {"w1": "Shard(0) of fc1.weight", "b1": "Shard(0) of fc1.bias"})


def test_the_cli_exits_3_on_an_ambiguous_relation():
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "shardproof.cli", "verify", os.path.join(CASES, "zero_bias_prebuilt.py")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "ambiguous" in p.stderr and "b1" in p.stderr and "Traceback" not in p.stderr


def test_candidate_relations_list_every_layout_constant_values_fit():
    zeros = np.zeros(8)
    rels, open_ = candidate_relations(zeros, [zeros[:4], zeros[:4]])
    assert open_ and Shard(0) in rels and Slices(0, {0: (0, 4), 1: (0, 4)}) in rels
    w = np.arange(8.0)
    assert candidate_relations(w, [w[:4], w[4:]]) == ([Shard(0)], False)
    rels, open_ = candidate_relations(w, [w[:2]] * 4)  # one layout (every rank rows 0:2), however it is written
    assert len(rels) == 1 and not open_
    with pytest.raises(RelationError, match="(?s)ambiguous.*bias: its values fit several layouts"):
        infer_by_value({"bias": zeros}, [{"bias": zeros[:4]}, {"bias": zeros[4:]}], ["bias"])


def test_a_data_probe_settles_a_repeating_mask():
    """A 0/1 mask split by rows repeats rows; dist_inputs applied to distinct data shows the split."""
    mask = np.array([[1, 0], [1, 0], [0, 1], [1, 0]])
    probe = ({"mask": np.arange(8).reshape(4, 2)}, [{"mask": np.arange(8).reshape(4, 2)[2 * r:2 * r + 2]}
                                                    for r in range(2)])
    ranks = [{"mask": mask[:2]}, {"mask": mask[2:]}]
    assert infer_by_value({"mask": mask}, ranks, ["mask"], probe=probe)["mask"].relation == Shard(0)


# ---------------------------------------------------------------- class 7: ignore_index

@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("config", CE_CONFIGS, ids=lambda c: "-".join(c.values()))
def test_ignore_index_verdict_follows_execution(labels, world, config):
    correct = labels[CE, world, _key(config)]
    _, report = _verify(CE, world, config)
    if config["ignored"] == "none":
        assert correct and report.status == "verified", (report.reason, report.findings)
    elif correct:  # honestly unknown: the rules' assumption is not met, and the reason says where
        assert report.status == "unknown", (report.status, report.findings)
        assert "'target' holds -100" in report.reason and "aten.nll_loss_forward" in report.reason, report.reason
        assert any("NOT MET" in a for a in report.assumptions)
    else:
        assert report.status == "violation", (report.status, report.reason)
        assert report.findings[0].op == ("aten.mean" if config["form"] == "vocab" else "aten.div"), report.findings[0]
    assert correct == (config["variant"] in ("masked", "global_count") or config["ignored"] == "none")


def _graph_reading(target_values_dtype: str, op: str = "aten.nll_loss_forward", ignore_index: int = -100) -> Graph:
    logp = Node("logp", "input", type=TensorType((4, 5), "f32"))
    target = Node("target", "input", type=TensorType((4,), target_values_dtype))
    view = Node("view", "aten.view", (target, [4]), type=TensorType((4,), target_values_dtype))
    nll = Node("nll", op, (logp, view, None, 1, ignore_index), type=(TensorType((), "f32"), TensorType((), "f32")))
    return Graph([logp, target, view, nll], {"out": nll})


def test_input_breaches_name_the_op_the_input_and_the_value():
    g = _graph_reading("i64")
    assert input_breaches(g, {"target": np.array([1, 2, 3, 4])}) == []
    (b,) = input_breaches(g, {"target": np.array([1, -100, 3, 4])})
    assert (b.assumption, b.op, b.node, b.input, b.value) == (VALID_INDICES, "aten.nll_loss_forward", "nll",
                                                              "target", -100)
    (b,) = input_breaches(_graph_reading("i64", ignore_index=0), {"target": np.array([1, 0, 3, 4])})
    assert b.value == 0 and "ignore_index" in b.assumption
    assert input_breaches(g, None) == []


# ---------------------------------------------------------------- zero padding (issue 15)

PADDED = os.path.join(CASES, "padded_mlp.py")
PADDED_VARIANTS = ("mlp", "norm", "norm_sliced", "softmax", "softmax_sliced")
PADDED_BUG_AT = {"norm": "aten.native_layer_norm", "softmax": "aten._softmax"}
PADDED_WORLD = 4  # FFN 5 padded to 8: rank 2 holds a real and a zero feature, rank 3 zeros only


@pytest.fixture(scope="module")
def padded_labels():
    """(world, variant) -> whether every rank's output equals the single-device one on gloo
    (the ranks hold fc1 and fc2 zero-padded by F.pad, cut per rank)."""
    configs = [dict(variant=v) for v in PADDED_VARIANTS]
    return {c["variant"]: outputs_agree(single, ranks)
            for c, (single, ranks) in zip(configs, run_on_gloo(PADDED, configs, PADDED_WORLD, None))}


@pytest.mark.parametrize("variant", PADDED_VARIANTS)
def test_padded_verdict_follows_execution(padded_labels, variant):
    """Padding that multiplies zero rows or is sliced away verifies; a LayerNorm or softmax
    over padded features is a violation at that op, on every rank."""
    world = PADDED_WORLD
    p, report = _verify(PADDED, world, dict(variant=variant))
    assert p.bindings["fc1.weight"].relation.__class__.__name__ == "Padded"
    if padded_labels[variant]:
        assert report.status == "verified", report.reason
    else:
        assert report.status == "violation"
        f = report.findings[0]
        assert (f.op, f.rank) == (PADDED_BUG_AT[variant], list(range(world)))
