"""Dump ops without a rule are decomposed by re-tracing them over fake tensors
(frontends/dump_decomp.py), as live capture decomposes them: a dump using
``aten.hardswish`` / ``aten.log_sigmoid_forward`` / ``aten.addcmul`` is proved, its buggy twin
is a violation at the right node, and an op with no rule and no decomposition still gives
unknown naming it. Every label is a fact about torch (the same math run with torch)."""
import json

import pytest
import torch
import torch.nn.functional as F

from shardproof.cli import main
from shardproof.frontends.dump_decomp import decompose_unruled
from shardproof.frontends.fx_text import parse_graph
from test_dump_cli import dump, write


# the activation written as the dump's ATen op(s); `{h}` is its input, `a` its output
ACTS = {
    "hardswish": ('a: "f32[{r}, {k}]" = torch.ops.aten.hardswish.default({h})', F.hardswish),
    "log_sigmoid": ('ls = torch.ops.aten.log_sigmoid_forward.default({h})\n'
                    'a: "f32[{r}, {k}]" = ls[0]', F.logsigmoid),
    "addcmul": ('a: "f32[{r}, {k}]" = torch.ops.aten.addcmul.default({h}, {h}, {h}, value=0.5)',
                lambda h: h + 0.5 * h * h),
}


def column_row(rows: int, k: int, act: str, reduce: bool) -> str:
    """x @ w1 (column shard), an activation, @ w2 (row shard), all_reduce when `reduce`."""
    tail = (f'ar: "f32[{rows}, 4]" = torch.ops._c10d_functional.all_reduce.default(mm2, "sum", "0")\n'
            f'wt: "f32[{rows}, 4]" = torch.ops._c10d_functional.wait_tensor.default(ar)\nreturn (wt,)'
            if reduce else "return (mm2,)")
    return dump(f'x: "f32[{rows}, 16]", w1: "f32[16, {k}]", w2: "f32[{k}, 4]"', f'''
# File: model.py:3 in forward, code: h = x @ w1
mm: "f32[{rows}, {k}]" = torch.ops.aten.mm.default(x, w1)
# File: model.py:4 in forward, code: a = act(h)
{ACTS[act][0].format(r=rows, k=k, h="mm")}
# File: model.py:5 in forward, code: y = a @ w2
mm2: "f32[{rows}, 4]" = torch.ops.aten.mm.default(a, w2)
''' + tail)


RELATIONS = "inputs:\n  x: Replicate()\n  w1: Shard(1)\n  w2: Shard(0)\nexpect:\n  mm2: {of: mm2, relation: Replicate()}\n"


def run(tmp_path, act: str, reduce: bool, capsys):
    seq = write(tmp_path / "seq", {"fw.r0.py": column_row(8, 32, act, False)})
    dist = write(tmp_path / "dist", {f"fw.r{r}.py": column_row(8, 16, act, reduce) for r in range(2)})
    rel = tmp_path / "rel.yaml"
    rel.write_text(RELATIONS.replace("mm2: {of", ("wt" if reduce else "mm2") + ": {of"))
    code = main(["verify", "--seq", seq, "--dist", dist, "--relations", str(rel), "--json", "-", "--no-fix"])
    return code, json.loads(capsys.readouterr().out)


def torch_label(act: str) -> tuple[bool, bool]:
    """(the all-reduced column/row program equals the single device, one rank's partial does)."""
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = (torch.randn(s, generator=g, dtype=torch.float64) for s in ((8, 16), (16, 32), (32, 4)))
    f = ACTS[act][1]
    single = f(x @ w1) @ w2
    parts = [f(x @ w1[:, 16 * r:16 * (r + 1)]) @ w2[16 * r:16 * (r + 1)] for r in range(2)]
    return torch.allclose(sum(parts), single), torch.allclose(parts[0], single)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_an_op_without_a_rule_in_a_dump_is_decomposed_and_proved(tmp_path, capsys, act):
    correct, _ = torch_label(act)
    assert correct
    code, report = run(tmp_path, act, True, capsys)
    assert code == 0 and report["status"] == "verified", report.get("reason")


@pytest.mark.parametrize("act", sorted(ACTS))
def test_the_decomposed_dump_without_its_all_reduce_is_a_violation(tmp_path, capsys, act):
    _, partial_equal = torch_label(act)
    assert not partial_equal
    code, report = run(tmp_path, act, False, capsys)
    assert code == 1 and report["status"] == "violation"
    finding = report["findings"][0]
    assert finding["node"] == "mm2" and finding["source"].startswith("model.py:5")


def test_decomposed_nodes_keep_the_dump_line_and_are_named_after_the_node():
    g = decompose_unruled(parse_graph(column_row(8, 32, "hardswish", False), "d.py"))
    ops = [n.op for n in g.nodes]
    assert "aten.hardswish" not in ops and "aten.clamp" in ops
    inner = [n for n in g.nodes if n.name.startswith("a.")]
    assert inner and all(str(n.source).startswith("model.py:4") and n.origin.file == "d.py" for n in inner)
    assert g.node("mm2").args[0] in inner  # the consumer reads the decomposition's output


def test_a_multi_output_op_is_read_through_its_getitem():
    g = decompose_unruled(parse_graph(column_row(8, 32, "log_sigmoid", False), "d.py"))
    assert not any(n.op in ("aten.log_sigmoid_forward", "getitem") for n in g.nodes)
    assert g.node("mm2").args[0].name.startswith("ls.")


def test_an_op_with_no_rule_and_no_decomposition_is_still_unknown_naming_it(tmp_path, capsys):
    text = column_row(8, 32, "hardswish", False).replace("aten.hardswish.default", "aten.special_bessel_j0.default")
    g = decompose_unruled(parse_graph(text, "d.py"))
    assert g.node("a").op == "aten.special_bessel_j0"
    seq = write(tmp_path / "seq", {"fw.r0.py": text})
    dist = write(tmp_path / "dist", {f"fw.r{r}.py": text.replace("32", "16") for r in range(2)})
    code = main(["verify", "--seq", seq, "--dist", dist, "--auto-relations", "--json", "-", "--no-fix"])
    report = json.loads(capsys.readouterr().out)
    assert code == 2 and report["status"] == "unknown" and "aten.special_bessel_j0" in report["reason"]
