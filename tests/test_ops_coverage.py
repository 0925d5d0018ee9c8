"""Coverage by construction (issue 15): every op of PyTorch's core ATen opset has a rule or a
documented decomposition, apart from an explicit allow-list that may only shrink; and
``shardproof ops`` lists the coverage."""
import json
import os

import pytest

from shardproof.cli import main
from shardproof.ops.coverage import DECOMPOSED, core_aten_missing, coverage_rows
from shardproof.ops.registry import REGISTRY, load_builtin

torch = pytest.importorskip("torch")

ALLOW = os.path.join(os.path.dirname(__file__), "data", "core_aten_missing.txt")


def _allowed() -> list[str]:
    with open(ALLOW) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def test_core_aten_ops_without_a_rule_are_exactly_the_allow_list():
    missing, allowed = set(core_aten_missing()), _allowed()
    assert len(allowed) == len(set(allowed)), "duplicate lines in core_aten_missing.txt"
    new = sorted(missing - set(allowed))
    stale = sorted(set(allowed) - missing)
    assert not new, f"core-ATen ops with no rule nor documented decomposition: {new}"
    assert not stale, f"ops that now have a rule: delete their lines from {ALLOW}: {stale}"


A = torch.ops.aten
# a sample call of each documented decomposition
SAMPLES = {
    "aten.select_scatter": (lambda x, s: A.select_scatter(x, s, 1, 2), (torch.randn(3, 4), torch.randn(3))),
    "aten.upsample_nearest2d": (lambda x: A.upsample_nearest2d(x, [8, 6]), (torch.randn(1, 2, 4, 3),)),
}


@pytest.mark.parametrize("op", sorted(DECOMPOSED))
def test_documented_decompositions_are_into_ruled_ops(op):
    """The capture's decomposition table turns the op into ops that all have rules."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from shardproof.frontends.torch_decomp import capture_decompositions
    load_builtin()
    assert op not in REGISTRY
    fn, args = SAMPLES[op]
    gm = make_fx(fn, decomposition_table=capture_decompositions())(*args)
    ops = {"aten." + n.target._opname for n in gm.graph.nodes if n.op == "call_function"}
    assert op not in ops and all(o in REGISTRY for o in ops), ops
    torch.testing.assert_close(gm(*args), fn(*args))


def test_issue_15_ordinary_ops_have_rules():
    load_builtin()
    for op in ("bernoulli", "native_dropout", "cumsum", "topk", "roll", "constant_pad_nd", "linalg_vector_norm",
               "logsumexp", "flip", "index_add", "round", "floor", "softplus", "min", "max", "prod", "std", "var",
               "mse_loss"):
        assert "aten." + op in REGISTRY, op


def test_coverage_rows_name_the_numerics_and_conventions():
    rows = {r["op"]: r for r in coverage_rows()}
    assert rows["aten.cumsum"]["numerics"] == "torch aten.cumsum"
    assert "same randomness" in rows["aten.bernoulli"]["conventions"]
    assert rows["_c10d_functional.all_reduce"]["rule"] == "collective"
    assert rows["aten.exp"]["rule"] == "elementwise"


def test_ops_subcommand_lists_coverage(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "aten.topk" in out and "torch aten.topk" in out
    assert main(["ops", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["op"] for r in data["ops"]} == set(REGISTRY)
    assert sorted(data["core_aten_missing"]) == sorted(_allowed())
    assert main(["ops", "--missing-core"]) == 0
    lines = capsys.readouterr().out.split()
    assert sorted(op for op in lines if op.startswith("aten.")) == sorted(_allowed())
    assert "aten.convolution" not in lines and "aten.cumsum" not in lines


def test_unknown_by_design_ops_give_their_reason():
    """Data-dependent and symbolic ops: a declared check names the reason (unknown, never a crash)."""
    from shardproof.ir.graph import Node, TensorType
    from shardproof.ops.coverage import UNKNOWN_BY_DESIGN
    from shardproof.ops.registry import failed_check
    load_builtin()
    x = Node("x", "input", type=TensorType((2, 3), "f32"))
    for op in UNKNOWN_BY_DESIGN:
        args = (x, [4, 3]) if op == "aten.resize_" else (x,)
        reason = failed_check(REGISTRY[op], Node("n", op, args, {}, None))
        assert reason and reason.startswith(op), (op, reason)
    same = Node("n", "aten.resize_", (x, [2, 3]), {}, TensorType((2, 3), "f32"))
    assert failed_check(REGISTRY["aten.resize_"], same) is None  # to its own size: the identity


def test_a_cnn_training_step_captures_into_ruled_ops():
    """Convolutions, batch/group norm, pooling, upsampling, forward and backward: every op the
    capture keeps has a rule (the rest decompose through torch's table)."""
    from torch import nn
    from torch._subclasses.functional_tensor import FunctionalTensorMode, dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx
    from shardproof.frontends.torch_decomp import capture_decompositions
    load_builtin()
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4, track_running_stats=False), nn.ReLU(),
                        nn.MaxPool2d(2), nn.GroupNorm(2, 4), nn.Conv2d(4, 4, 3, groups=2), nn.AdaptiveAvgPool2d(2),
                        nn.Upsample(scale_factor=2, mode="bilinear"), nn.Flatten())
    names = [n for n, _ in net.named_parameters()]

    def step(x, *ps):
        out = torch.func.functional_call(net, dict(zip(names, ps)), (x,))
        return torch.autograd.grad(out.square().sum(), ps)
    ps = [p.detach().requires_grad_() for p in net.parameters()]
    gm = make_fx(dispatch_functionalize(step, FunctionalTensorMode()),
                 decomposition_table=capture_decompositions())(torch.randn(2, 3, 8, 8), *ps)
    ops = {"aten." + n.target._opname for n in gm.graph.nodes if n.op == "call_function" and hasattr(n.target, "_opname")}
    assert {"aten.convolution_backward", "aten.max_pool2d_with_indices_backward"} <= ops
    assert all(op in REGISTRY for op in ops), sorted(op for op in ops if op not in REGISTRY)
