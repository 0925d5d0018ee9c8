"""The Hugging Face recipe (examples/huggingface): a tiny Llama with grouped-query attention,
parallelized by transformers' own tp_plan through its public route, verified with eager and
sdpa attention; an injected plan bug located at its node. The labels (the correct program
agrees with the single device on a real gloo group, the buggy one does not) are checked by
test_labels_on_gloo at the end (eager: slow; sdpa: sweep)."""
import os
import sys

import pytest

pytest.importorskip("transformers", reason="the Hugging Face recipe needs transformers (the `corpus` extra)")
pytest.importorskip("accelerate", reason="transformers' tp_plan route needs accelerate (the `corpus` extra)")

from shardproof import api  # noqa: E402
from shardproof.frontends.torch_capture import CaptureError, capture_single  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "examples", "huggingface")
RECIPE = os.path.join(ROOT, "hf_llama_tp.py")
BUG = os.path.join(ROOT, "bugs", "hf_llama_tp_mlp_all_reduce.py")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(__file__))

import hf_llama_tp  # noqa: E402


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_tp_plan_llama_with_gqa_verifies(attn):
    case = hf_llama_tp.make_case(2, attn=attn)
    report = api.verify_case(case)
    assert report.status == "verified", (report.status, report.findings[:1], report.outputs)
    assert [(o.name, o.holds) for o in report.outputs] == [("out", "Replicate()")]
    # the plan put the weights where transformers' plan says: q/k/v/gate/up colwise, o/down rowwise
    rel = {k.split(".")[-2]: v["relation"] for k, v in report.relations.items() if k.endswith("weight")}
    assert rel["q_proj"] == rel["k_proj"] == rel["up_proj"] == "Shard(0)"
    assert rel["o_proj"] == rel["down_proj"] == "Shard(1)"


def _producer_chain(graph, node):
    """The ops `node`'s first tensor input comes from, through views and waits."""
    by_name = {n.name: n for n in graph.nodes}
    seen, x = [], node
    while True:
        args = [a for a in x.args if getattr(a, "name", None) in by_name]
        if not args:
            return seen
        x = args[0]
        seen.append(x.op)
        if "all_reduce" in x.op or x.op.endswith(("mm", "addmm")):
            return seen


@pytest.mark.parametrize("attn", ["eager", pytest.param("sdpa", marks=pytest.mark.slow)])
def test_extra_all_reduce_plan_entry_is_located(attn):
    import importlib.util
    spec = importlib.util.spec_from_file_location("hf_llama_tp_mlp_all_reduce", BUG)
    bug = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bug)
    case = hf_llama_tp.make_case(2, attn=attn, plan=bug.WRONG_ENTRY, name="bug")
    report = api.verify_case(case)
    assert report.status == "violation", report.status
    f = report.findings[0]
    assert f.kind == "reduced-twice", f
    assert "all_reduce" in f.op, f
    # the node is the second all_reduce of layer 0's MLP output (transformers' AllReduceParallel,
    # installed by the wrong entry), fed by down_proj's own all_reduce
    assert "transformers/distributed/tensor_parallel.py" in f.source and "transform_output_post_forward" in f.source, f
    graph = api.prepare(case).dist.graphs[0]
    node = next(n for n in graph.nodes if n.name == f.node)
    reduces = [n.name for n in graph.nodes if n.op.startswith("_c10d_functional.all_reduce")]
    assert reduces.index(f.node) == 3, reduces  # embedding, o_proj, down_proj, then the extra one
    assert "all_reduce" in _producer_chain(graph, node)[-1], _producer_chain(graph, node)


def _train_case(attn):
    import hf_llama_tp_train
    return hf_llama_tp_train.make_case(2, attn=attn)


def test_training_step_verifies_eager():
    report = api.verify_case(_train_case("eager"))
    assert report.status == "verified", (report.status, report.findings[:1])
    held = {o.name: o.holds for o in report.outputs}
    assert held["grad:model.model.embed_tokens.weight"] == "Shard(0)", held  # vocab-parallel embedding
    assert held["grad:model.model.layers.0.self_attn.o_proj.weight"] == "Shard(1)", held
    assert held["grad:model.model.norm.weight"] == "Replicate()", held


@pytest.mark.slow
def test_training_step_verifies_sdpa():
    """sdpa's backward with an explicit (padding/causal) mask: the mask is one more child of the term."""
    report = api.verify_case(_train_case("sdpa"))
    assert report.status == "verified", (report.status, report.reason)


def test_data_dependent_branch_names_the_line():
    import torch

    def program(x):
        if x.sum() > 0:  # Python control flow on a value
            return x * 2
        return x

    with pytest.raises(CaptureError) as info:
        capture_single(program, {"x": torch.ones(3)})
    message = str(info.value)
    assert "test_huggingface_recipe.py:" in message and "if x.sum() > 0" in message, message
    assert "tensor's value" in message


@pytest.mark.slow
@pytest.mark.parametrize("attn", ["eager", pytest.param("sdpa", marks=pytest.mark.sweep)])
def test_labels_on_gloo(attn, monkeypatch):
    from gloo import max_differences, run_case_file
    monkeypatch.setenv("ATTN", attn)  # the spawned ranks build the same attention
    correct = max_differences(run_case_file(RECIPE, 2))["out"]
    buggy = max_differences(run_case_file(BUG, 2))["out"]
    assert correct < 1e-5 and buggy > 1e-2, (correct, buggy)
