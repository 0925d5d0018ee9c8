"""The Hugging Face corpus (examples/huggingface/corpus.py): eight transformers architectures under
their own tp_plan. In `make test` (the whole matrix, issue 15's acceptance; most of it `slow`):
every configuration (TP 2 and 4, eager and sdpa, forward and training step) verified, every
injected plan bug (TP 2 and 4, eager and sdpa) a violation at its node (kind, op, hint, source
line), Qwen3's and Gemma 3's q/k-norm gradient hook and its dropped all-reduce, and every
configuration written as readable FX dumps verified (or located) from the text alone.
The labels are facts about PyTorch, checked by running them on a real gloo group (`make test-all`:
`sweep`, 10-30 s each): test_forward_labels_on_gloo (every architecture's forward, correct and
buggy, at TP 2 eager and TP 4 sdpa), test_training_labels_on_gloo (every training step's loss
and gradients), test_qk_norm_grad_bug_labels_on_gloo (the dropped q/k-norm hook)."""
import os
import sys

import pytest

pytest.importorskip("transformers", reason="the Hugging Face corpus needs transformers (the `corpus` extra)")
pytest.importorskip("accelerate", reason="transformers' tp_plan route needs accelerate (the `corpus` extra)")

from conftest import check_hint  # noqa: E402
from shardproof import api  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "examples", "huggingface")
CORPUS = os.path.join(ROOT, "corpus.py")
sys.path.insert(0, ROOT)

import corpus  # noqa: E402
import make_corpus  # noqa: E402

ARCHS = list(corpus.ARCHS)
# where each injected bug is found: (finding kind, op)
FOUND = {"llama": ("reduced-twice", "_c10d_functional.all_reduce"),
         "qwen2": ("replicated-counted-per-rank", "aten.add"),
         "mistral": ("reduced-twice", "_c10d_functional.all_reduce"),
         "gemma2": ("partial-sum-never-reduced", "aten.pow"),
         "phi3": ("wrong-shard-offset", "aten.silu"),  # the activation of up rows taken for gate rows
         "qwen3": ("replicated-counted-per-rank", "aten.add"),
         "gemma3": ("partial-sum-never-reduced", "aten.pow"),
         "gpt_neox": ("reduced-twice", "_c10d_functional.all_reduce")}


def _verified(arch, world=2, attn="eager", mode="fw"):
    report = api.verify_case(corpus.make_case(arch, world, attn, mode))
    assert report.status == "verified", (arch, world, attn, mode, report.status, report.reason, report.findings[:1])
    held = {o.name: o.holds for o in report.outputs}
    if mode == "fw":
        assert held == {"out": "Replicate()"}, held
    else:
        assert held["loss"] == "Replicate()", held
        assert any(h.startswith("Shard(") for h in held.values()), held  # sharded weights' gradients
    return report


def _located(arch, world=2, attn="eager", mode="fw", found=None):
    case = corpus.make_case(arch, world, attn, mode, bug=True)
    report = api.verify_case(case)
    assert report.status == "violation", (arch, report.status, report.reason)
    f = report.findings[0]
    assert (f.kind, f.op) == (found or FOUND[arch]), (arch, f.kind, f.op, f.source)
    check_hint(f, case.meta)  # the hint names the fault, the source line is the bug's
    return f


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_verifies(arch):
    _verified(arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_injected_bug_is_located(arch):
    _located(arch)


def test_phi3_training_step_verifies():
    """Phi-3's gradients through its fused projections (colwise_gather_output / rowwise_split_input):
    each rank's block of the gathered gate_up gradient is a selection of the single device's
    concatenated gradient (the backward of chunk), not the gate or up half alone."""
    report = _verified("phi3", 2, "eager", "train")
    held = {o.name: o.holds for o in report.outputs}
    assert held["grad:model.model.layers.0.mlp.gate_up_proj.weight"] == "Shard(0)", held
    assert held["grad:model.model.layers.0.mlp.down_proj.weight"] == "Shard(1)", held


QK_NORM = list(corpus.GRAD_BUGS)  # q/k-norms "replicated_with_grad_allreduce": a post-accumulate-grad hook
GRAD_FOUND = ("missing-gradient-reduction", "aten.view")


@pytest.mark.parametrize("arch", [pytest.param(a, marks=() if a == "qwen3" else pytest.mark.slow)
                                  for a in QK_NORM])
def test_qk_norm_training_step(arch):
    """The step as transformers' Trainer takes it (loss.backward(), then .grad): the q/k-norms'
    gradient all-reduce, a hook autograd runs on accumulating the gradient, is captured, so the
    step verifies; dropping it (the norms "replicate") is a missing gradient reduction at the
    norm's weight."""
    report = _verified(arch, 2, "eager", "train")
    held = {o.name: o.holds for o in report.outputs}
    assert held["grad:model.model.layers.0.self_attn.q_norm.weight"] == "Replicate()", held
    f = _located(arch, 2, "eager", "train", GRAD_FOUND)
    assert f.actual.startswith('Partial("sum")'), f.actual


def test_tp4_sdpa_representative():
    _verified("gpt_neox", 4, "sdpa")


def test_training_step_representative():
    report = _verified("mistral", 2, "eager", "train")
    held = {o.name: o.holds for o in report.outputs}
    assert held["grad:model.model.layers.0.self_attn.o_proj.weight"] == "Shard(1)", held
    assert held["grad:model.model.layers.0.mlp.up_proj.weight"] == "Shard(0)", held


NO_TRAIN = {a for a, mode in corpus.UNPROVED if mode == "train"}
NO_SDPA = {("gemma2", "sdpa")}  # transformers refuses sdpa for Gemma 2 (its attention logits are soft-capped)


def test_gemma2_has_no_sdpa():
    with pytest.raises(ValueError, match="scaled_dot_product_attention"):
        corpus.single_model("gemma2", "sdpa")


# verified by the tests above (with their own checks), not again here
COVERED = {(a, 2, "eager", "fw") for a in ARCHS} | {(a, 2, "eager", "train") for a in QK_NORM} | {
    ("phi3", 2, "eager", "train"), ("mistral", 2, "eager", "train"), ("gpt_neox", 4, "sdpa", "fw")}
MATRIX = [(a, w, attn, mode) for a in ARCHS for w in (2, 4) for attn in corpus.ATTNS for mode in corpus.MODES
          if (a, w, attn, mode) not in COVERED and (a, attn) not in NO_SDPA and not (a in NO_TRAIN and mode == "train")]


@pytest.mark.slow
@pytest.mark.parametrize("arch,world,attn,mode", MATRIX)
def test_matrix_verifies(arch, world, attn, mode):
    _verified(arch, world, attn, mode)


@pytest.mark.slow
@pytest.mark.parametrize("arch,world,attn", [(a, w, attn) for a in ARCHS for w, attn in ((4, "eager"), (2, "sdpa"))
                                                        if (a, attn) not in NO_SDPA])
def test_matrix_bugs_located(arch, world, attn):
    _located(arch, world, attn)


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("world,attn", [(2, "eager"), (4, "sdpa")])
def test_forward_labels_on_gloo(world, attn):
    """Every architecture's correct program agrees with the single device on a real gloo group,
    its injected bug does not (one spawned process per rank builds every configuration)."""
    from gloo import run_on_gloo
    configs = [dict(arch=a, attn=attn, bug=b) for a in ARCHS for b in (False, True) if (a, attn) not in NO_SDPA]
    for config, (single, ranks) in zip(configs, run_on_gloo(CORPUS, configs, world, seed=None)):
        worst = max(float((r.double() - single.double()).abs().max()) for r in ranks)
        assert (worst > 1e-1) if config["bug"] else (worst < 1e-3), (config, worst)  # float32 logits of ~20


def _train_on_rank(arch, attn, bug=False):
    def run(rank, world):
        case = corpus.make_case(arch, world, attn, "train", bug)
        out = case.distributed(rank, world).train_step(dict(case.inputs), {}, case.train)
        whole = {n: (g.full_tensor() if hasattr(g, "full_tensor") else g) for n, g in out["grads"].items()}
        return float(out["loss"]), {n: g.detach().numpy() for n, g in whole.items()}
    return run


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("arch", [a for a in ARCHS if a not in NO_TRAIN])
def test_training_labels_on_gloo(arch):
    """The training step's loss and every gradient on a real gloo group equal the single device's."""
    import numpy as np
    loss, grads = _single_step(arch)
    for rank_loss, rank_grads in _gloo_steps(arch):
        assert abs(rank_loss - float(loss)) < 1e-4, (rank_loss, float(loss))
        assert set(rank_grads) == set(grads)
        for n, g in grads.items():
            np.testing.assert_allclose(rank_grads[n], g.numpy(), rtol=1e-4, atol=1e-3, err_msg=n)  # float32 sums


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("arch", QK_NORM)
def test_qk_norm_grad_bug_labels_on_gloo(arch):
    """Without the hook (the q/k-norms "replicate"), a real gloo group's q/k-norm gradients are
    not the single device's (each rank's covers its heads only); every other gradient still is."""
    import numpy as np
    loss, grads = _single_step(arch)
    for rank_loss, rank_grads in _gloo_steps(arch, bug=True):
        assert abs(rank_loss - float(loss)) < 1e-4, (rank_loss, float(loss))
        for n, g in grads.items():
            off = float(np.abs(rank_grads[n] - g.numpy()).max())
            assert (off > 1e-2) if n.endswith(("q_norm.weight", "k_norm.weight")) else (off < 1e-3), (n, off)


def _single_step(arch):
    import torch
    case = corpus.make_case(arch, 2, "eager", "train")
    params = dict(case.single.named_parameters())
    loss = case.train.loss(case.single(case.inputs["input_ids"], case.inputs["attention_mask"]), case.inputs)
    return loss.detach(), dict(zip(params, torch.autograd.grad(loss, list(params.values()))))


def _gloo_steps(arch, bug=False):
    from gloo import run_fn_on_gloo
    return run_fn_on_gloo(_train_on_rank(arch, "eager", bug), 2, timeout=300)


# ---------------------------------------------------------------- dumps (make corpus)

def _dump_round_trip(tmp, arch, mode, world, bug=False):
    """The live case written as readable FX dumps by make_corpus.py, then verified from the text
    alone with --auto-relations and the constants file the generator writes."""
    folder = os.path.join(str(tmp), arch, mode)
    dist = make_corpus.capture_dumps(corpus.make_case(arch, world, "eager", mode, bug), folder)
    assert sorted(os.listdir(os.path.join(folder, dist))) == [f"fw.g0.r{r}.py" for r in range(world)]
    text = open(os.path.join(folder, "tp1", "fw.g0.r0.py")).read()
    assert "torch.ops.aten" in text and "input_ids: " in text, text[:500]
    report = api.verify_dumps(os.path.join(folder, "tp1"), os.path.join(folder, dist),
                              os.path.join(folder, dist + ".constants.yaml"), auto_relations=True)
    if bug:
        assert report.status == "violation", (report.status, report.reason)
        assert (report.findings[0].kind, report.findings[0].op) == FOUND[arch], report.findings[0]
    else:
        assert report.status == "verified", (report.status, report.reason)
    return report


def test_dump_round_trip_representative(tmp_path):
    _dump_round_trip(tmp_path, "qwen2", "fw", 2)
    _dump_round_trip(tmp_path, "qwen2", "fw", 2, bug=True)


@pytest.mark.slow
@pytest.mark.parametrize("arch,mode,world,bug", [
    c for c in make_corpus.configurations() if c[:3] != ("qwen2", "fw", 2)
    and not (c[0] in NO_TRAIN and c[1] == "train")])
def test_dump_round_trips(tmp_path, arch, mode, world, bug):
    _dump_round_trip(tmp_path, arch, mode, world, bug)
