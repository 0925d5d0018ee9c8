"""The README's recipes (examples/): each verifies as the README says, and its injected bug is
a violation located where the program breaks. Every label (correct / buggy) is checked by
running the program on a real gloo process group against the single-device program."""
import importlib.util
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the recipes need the torch extra")

from gloo import run_fn_on_gloo  # noqa: E402
from recipes_gloo import ROOT, gloo_forward_agrees, gloo_training_agrees, load_recipe  # noqa: E402
from shardproof.api import verify_case, verify_dumps  # noqa: E402
from shardproof.frontends.jax_lower import host_devices  # noqa: E402

host_devices(8)  # before anything imports jax (the JAX recipe's shard_map runs on 4 host devices)

MEGATRON, DTENSOR, FSDP2, TITAN = ("megatron_style/block.py", "dtensor/tiny_lm.py", "fsdp2/mlp.py",
                                   "torchtitan_style/llama_tp.py")


def _verify(relpath, world, **config):
    return verify_case(load_recipe(relpath).case(world, **config))


def _line_of(relpath, text):
    """`relpath:N`, N the line of the recipe holding `text` (where a finding must point)."""
    lines = open(os.path.join(ROOT, "examples", relpath)).read().splitlines()
    return f"{relpath}:{next(i for i, line in enumerate(lines, 1) if text in line)}"


def _first(report):
    assert report.status == "violation", (report.status, report.reason)
    f = report.findings[0]
    return f


@pytest.mark.parametrize("config", [{}, {"sequence_parallel": False}], ids=["sp", "tp"])
def test_megatron_style_step_verified_and_agrees_on_gloo(config):
    report = _verify(MEGATRON, 2, **config)
    assert report.status == "verified" and report.strength == "proof", report.reason
    assert gloo_training_agrees(MEGATRON, 2, **config)


def test_megatron_style_ln_grad_not_reduced_located():
    assert not gloo_training_agrees(MEGATRON, 2, bug="ln_grad_not_reduced")
    f = _first(_verify(MEGATRON, 2, bug="ln_grad_not_reduced"))
    assert f.kind == "missing-gradient-reduction" and f.op == "aten.sub", f
    assert "ln.weight" in f.message and "Partial" in f.message, f.message  # the update of a partial gradient
    assert _line_of(MEGATRON, "updated = {n:") in f.source, f.source


def test_dtensor_forward_with_loss_parallel_verified():
    report = _verify(DTENSOR, 2)
    assert report.status == "verified" and report.strength == "proof", report.reason
    assert gloo_forward_agrees(DTENSOR, 2)


def test_dtensor_plan_mistake_is_harmless_in_forward_but_not_in_training():
    """norm2 without SequenceParallel: the forward is right (a LayerNorm per token), the
    norm's gradients are partial sums nobody reduces."""
    bug = "norm_not_sequence_parallel"
    assert gloo_forward_agrees(DTENSOR, 2, bug=bug)
    assert _verify(DTENSOR, 2, bug=bug).status == "verified"
    assert not gloo_training_agrees(DTENSOR, 2, train=True, bug=bug)
    f = _first(_verify(DTENSOR, 2, train=True, bug=bug))
    assert f.kind == "missing-gradient-reduction" and f.op == "aten.sub", f
    assert "norm2.weight" in f.message and "Partial" in f.message, f.message


def test_dtensor_training_step_verified_and_agrees_on_gloo():
    report = _verify(DTENSOR, 2, train=True)
    assert report.status == "verified" and report.strength == "proof", report.reason
    assert gloo_training_agrees(DTENSOR, 2, train=True)


def test_dtensor_training_step_under_loss_parallel_never_a_violation():
    """Correct on gloo; shardproof proves it or names the op it stops at (the backward of
    loss_parallel's vocab mask has no lemma yet), never a violation."""
    assert gloo_training_agrees(DTENSOR, 2, train=True, vocab_parallel_loss=True)
    report = _verify(DTENSOR, 2, train=True, vocab_parallel_loss=True)
    assert report.status in ("verified", "unknown"), [f.message for f in report.findings]
    if report.status == "unknown":
        assert "op aten." in report.reason, report.reason


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_step_verified_and_agrees_on_gloo(world):
    report = _verify(FSDP2, world)
    assert report.status == "verified" and report.strength == "proof", report.reason
    assert gloo_training_agrees(FSDP2, world)


def test_fsdp2_local_mean_located():
    assert not gloo_training_agrees(FSDP2, 2, bug="local_mean")
    f = _first(_verify(FSDP2, 2, bug="local_mean"))
    assert f.op == "aten.div" and "mlp.py" in f.source and "train_step" in f.source, f


def test_torchtitan_style_block_verified_and_agrees_on_gloo():
    report = _verify(TITAN, 2)
    assert report.status == "verified" and report.strength == "proof", report.reason
    assert gloo_forward_agrees(TITAN, 2)


def test_torchtitan_style_unsharded_input_located():
    assert not gloo_forward_agrees(TITAN, 2, bug="input_not_sharded")
    f = _first(_verify(TITAN, 2, bug="input_not_sharded"))
    # the first tensor that breaks: the attention's q/k/v view of the w-times-gathered sequence
    assert f.op == "aten._unsafe_view" and "llama_tp.py" in f.source and "Attention" not in f.node, f


def _dumps_module():
    sys.path.insert(0, os.path.join(ROOT, "examples", "dumps"))
    import make_dumps
    return make_dumps


def _mlp_on_gloo(name):
    def run(rank, world):
        m = _dumps_module()
        return getattr(m, name)(**m.shard(m.weights(), rank, world)).numpy()
    return run


def test_dump_programs_labelled_on_gloo():
    m = _dumps_module()
    want = m.mlp(**m.weights()).numpy()
    assert all(np.allclose(r, want, atol=1e-5) for r in run_fn_on_gloo(_mlp_on_gloo("tp_mlp"), 2))
    assert not any(np.allclose(r, want, atol=1e-5) for r in run_fn_on_gloo(_mlp_on_gloo("tp_mlp_bug"), 2))


def test_make_dumps_then_verify(tmp_path):
    _dumps_module().main(str(tmp_path))
    report = verify_dumps(str(tmp_path / "tp1"), str(tmp_path / "tp2"), auto_relations=True)
    assert report.status == "verified" and report.strength == "proof", report.reason
    f = _first(verify_dumps(str(tmp_path / "tp1"), str(tmp_path / "tp2.bug"), auto_relations=True))
    assert (f.kind, f.node, f.op) == ("partial-sum-never-reduced", "add", "aten.add"), f


def test_jax_stablehlo_dumps(tmp_path):
    if importlib.util.find_spec("jax") is None:
        pytest.skip("the JAX recipe needs the jax extra")
    sys.path.insert(0, os.path.join(ROOT, "examples", "jax"))
    import make_stablehlo
    from jax_models import mlp, tp_mlp_case
    make_stablehlo.main(str(tmp_path))
    # labels: the shard_map programs run on JAX's host devices
    import jax
    for bug, agrees in ((None, True), ("no_psum", False)):
        case = tp_mlp_case(make_stablehlo.WORLD, bug)
        mesh = jax.make_mesh((make_stablehlo.WORLD,), ("tp",), devices=jax.devices("cpu")[:make_stablehlo.WORLD])
        from jax.sharding import NamedSharding, PartitionSpec
        args = [jax.device_put(v, NamedSharding(mesh, case.in_specs.get(n, PartitionSpec())))
                for n, v in case.inputs.items()]
        got = np.asarray(jax.jit(case.distributed(mesh))(*args))
        assert np.allclose(got, np.asarray(mlp(*case.inputs.values())), atol=1e-4) == agrees
    expect = {"out0": "Replicate()"}
    seq = str(tmp_path / "single.mlir")
    report = verify_dumps(seq, str(tmp_path / "tp.mlir"), auto_relations=True, expect=expect)
    assert report.status == "verified" and report.strength == "proof", report.reason
    f = _first(verify_dumps(seq, str(tmp_path / "tp.bug.mlir"), auto_relations=True, expect=expect))
    assert f.kind == "partial-sum-never-reduced" and f.op == "xla.dot_general", f


@pytest.mark.slow  # three processes compile with torch.compile (~30 s on 2 busy cores)
def test_torch_logs_dumps_then_verify(tmp_path):
    """TORCH_LOGS=aot_graphs of torch.compile'd programs (each rank a process, as torchrun
    starts them), cut into dump files, verified."""
    make_dumps = _dumps_module()
    from torch_logs import split_aot_graphs
    make_dumps.main_torch_logs(str(tmp_path))
    report = verify_dumps(str(tmp_path / "tp1"), str(tmp_path / "tp2"), auto_relations=True)
    assert report.status == "verified" and report.strength == "proof", report.reason
    log = (tmp_path / "logs" / "rank1.log").read_text()
    torchrun = "\n".join(f"[rank{r}]:{line}" for line in log.splitlines() for r in (1, 0))  # interleaved ranks
    assert split_aot_graphs(torchrun, "[rank1]:") == split_aot_graphs(log) != []
