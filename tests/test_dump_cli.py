"""Verifying graph dumps from the command line: ``shardproof verify --seq PATH --dist PATH``
with a relations file (inputs, expect, constants) or ``--auto-relations``, plug-in ops, and
a clear exit-3 message naming the file and line for every kind of bad input."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from shardproof.api import InputError, prepare_dumps, verify_dumps
from shardproof.cli import main

GRAPHS = os.path.join(ROOT, "..", "shared", "graphs", "entangle")
GRAD_ACC = os.path.join(GRAPHS, "bug_grad_accumulation")
GRAD_ACC_YAML = os.path.join(ROOT, "examples", "dumps", "grad_accumulation.yaml")
PLUGIN = os.path.join(ROOT, "examples", "plugins", "softcap.py")
PLUGIN_DUMPS = os.path.join(ROOT, "examples", "plugins", "dumps")


def shared(path):
    if not os.path.isdir(path):
        pytest.skip(f"../shared/graphs absent: {os.path.normpath(path)} not found")
    return path


def dump(params: str, body: str) -> str:
    lines = "".join(f"        {ln}\n" for ln in body.strip("\n").splitlines())
    return f"class GraphModule(torch.nn.Module):\n    def forward(self, {params}):\n{lines}"


def mlp(rows: int, op: str = "aten.relu.default") -> str:
    return dump(f'x: "f32[{rows}, 16]", w: "f32[16, 4]"', f'''
# File: model.py:3 in forward, code: h = act(x)
h: "f32[{rows}, 16]" = torch.ops.{op}(x);  x = None
mm: "f32[{rows}, 4]" = torch.ops.aten.mm.default(h, w);  h = w = None
return (mm,)''')


def write(folder, files: dict) -> str:
    os.makedirs(folder, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    return str(folder)


@pytest.fixture
def row_parallel(tmp_path):
    """A tiny row-parallel pair: x sharded by rows over 2 ranks, w replicated."""
    seq = write(tmp_path / "tp1", {"fw.g0.r0.py": mlp(8)})
    dist = write(tmp_path / "tp2", {"fw.g0.r0.py": mlp(4), "fw.g0.r1.py": mlp(4)})
    return seq, dist


def cli(capsys, *args):
    try:
        code = main(["verify", *map(str, args)])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_paragraph(err: str) -> str:
    assert "Traceback" not in err and err.startswith("shardproof: error: "), err
    return " ".join(err.split())


# ---------------------------------------------------------------- the grad-accumulation pair

def test_grad_accumulation_is_a_violation_at_twice_the_loss(capsys):
    seq, dist = shared(os.path.join(GRAD_ACC, "1step")), os.path.join(GRAD_ACC, "2step.bug")
    code, out, _ = cli(capsys, "--seq", seq, "--dist", dist, "--relations", GRAD_ACC_YAML, "--json", "-")
    assert code == 1, out
    report = json.loads(out)
    assert report["status"] == "violation" and report["outputs"][0]["name"] == "add_1"
    finding = report["findings"][0]
    # the first tensor with no single-device counterpart: each micro-batch's mean
    assert (finding["node"], finding["op"], finding["rank"]) == ("mean", "aten.mean", [0])
    assert finding["source"].endswith(":100 in my_loss")
    # the counterexample is the accumulated loss itself: twice the one-step loss
    cex = finding["counterexample"]
    assert cex["tensor"] == "output add_1" and "add_3" in cex["text"]
    assert float(cex["distributed"]) == 2 * float(cex["single_device"]) != 0
    assert finding["kind"] == "scaling-mismatch" and "2x" in finding["hint"]


def test_micro_batch_means_added_are_a_violation_at_the_output(tmp_path, capsys):
    """The same bug in miniature (no shared graphs needed): the mean of each half, added,
    is twice the mean of the whole. The first tensor with no single-device counterpart is a
    half's mean; the counterexample is at the output, where the expectation is stated."""
    seq = write(tmp_path / "seq", {"fw.g0.r0.py": dump('x: "f32[8]"', '''
sum_1: "f32[]" = torch.ops.aten.sum.default(x);  x = None
div: "f32[]" = torch.ops.aten.div.Tensor(sum_1, 8);  sum_1 = None
return (div,)''')})
    dist = write(tmp_path / "dist", {"fw.g0.r0.py": dump('a: "f32[4]", b: "f32[4]"', '''
# File: train.py:7 in loss, code: loss = x.mean()
mean: "f32[]" = torch.ops.aten.mean.default(a);  a = None
mean_1: "f32[]" = torch.ops.aten.mean.default(b);  b = None
add: "f32[]" = torch.ops.aten.add.Tensor(mean, mean_1);  mean = mean_1 = None
return (add,)''')})
    rel = tmp_path / "rel.yaml"
    rel.write_text('inputs:\n  a: "Slices(0, {0: (0, 4)}) of x"\n  b: "Slices(0, {0: (4, 8)}) of x"\n')
    code, out, _ = cli(capsys, "--seq", seq, "--dist", dist, "--relations", rel, "--json", "-")
    finding = json.loads(out)["findings"][0]
    assert code == 1 and (finding["node"], finding["op"], finding["rank"]) == ("mean", "aten.mean", [0])
    assert finding["source"] == "train.py:7 in loss" and finding["kind"] == "scaling-mismatch"
    cex = finding["counterexample"]
    assert cex["tensor"] == "output div" and "rank 0's add holds" in cex["text"]
    assert float(cex["distributed"]) == 2 * float(cex["single_device"]) != 0 and "output div is 2x" in finding["hint"]


def fixed_grad_accumulation(tmp_path) -> str:
    """The 2-step program with each micro-batch's loss halved: the mean over all 8 items."""
    with open(os.path.join(shared(GRAD_ACC), "2step.bug", "fw.g0.r0.py")) as f:
        text = f.read()
    for mean, detach in (("mean", "detach"), ("mean_1", "detach_3")):
        old = f'{detach}: "f32[]" = torch.ops.aten.detach.default({mean});  {mean} = None'
        assert old in text
        text = text.replace(old, f'half_{mean}: "f32[]" = torch.ops.aten.mul.Tensor({mean}, 0.5);  {mean} = None\n'
                                 f'        {detach}: "f32[]" = torch.ops.aten.detach.default(half_{mean})')
    return write(tmp_path / "2step.fixed", {"fw.g0.r0.py": text})


def test_fixed_grad_accumulation_is_no_violation(tmp_path):
    report = verify_dumps(os.path.join(GRAD_ACC, "1step"), fixed_grad_accumulation(tmp_path), GRAD_ACC_YAML)
    assert report.status != "violation" and not report.findings, report.findings


def test_fixed_grad_accumulation_is_verified(tmp_path, capsys):
    code, out, _ = cli(capsys, "--seq", os.path.join(GRAD_ACC, "1step"), "--dist", fixed_grad_accumulation(tmp_path),
                       "--relations", GRAD_ACC_YAML)
    assert code == 0, out


def test_several_graph_kinds_need_kind(capsys):
    folder = shared(os.path.join(GRAPHS, "bug_missing_layernorm_allreduce"))
    code, _, err = cli(capsys, "--seq", os.path.join(folder, "tp1"), "--dist", os.path.join(folder, "tp2.bug"),
                       "--auto-relations")
    assert code == 3 and "several graph kinds (both, bw): pick one with --kind" in one_paragraph(err)


# ---------------------------------------------------------------- relations, expectations, constants

def test_auto_relations_prints_the_table(capsys, row_parallel):
    code, out, _ = cli(capsys, "--seq", row_parallel[0], "--dist", row_parallel[1], "--auto-relations")
    assert code == 0, out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split()[:1] in (["x"], ["w"])}
    assert rows["x"] == ["│", "Shard(0)", "│", "x", "│", "name-shape"]
    assert rows["w"] == ["│", "Replicate()", "│", "w", "│", "name-shape"]


def test_expect_on_the_command_line(capsys, row_parallel):
    code, out, _ = cli(capsys, "--seq", row_parallel[0], "--dist", row_parallel[1], "--auto-relations",
                       "--expect", "mm=Shard(0)", "--json", "-")
    assert code == 0 and json.loads(out)["outputs"][0] == {"name": "mm", "expected": "Shard(0)", "holds": "Shard(0)",
                                                           "ok": True}
    code, out, _ = cli(capsys, "--seq", row_parallel[0], "--dist", row_parallel[1], "--auto-relations",
                       "--expect", "mm=Replicate()")
    assert code == 1


def test_outputs_with_other_names_and_saved_tensors(tmp_path, capsys):
    # the single-device side returns the result as `out`, the ranks as `mm` plus a saved tensor
    seq = write(tmp_path / "seq", {"fw.g0.r0.py": mlp(8).replace("mm:", "out:").replace("(mm,)", "(out,)")})
    saved = mlp(4).replace("return (mm,)", "return (h, mm)").replace("h = w = None", "w = None")
    dist = write(tmp_path / "dist", {"fw.g0.r0.py": saved, "fw.g0.r1.py": saved})
    code, _, err = cli(capsys, "--seq", seq, "--dist", dist, "--auto-relations")
    assert code == 3 and "out have no distributed counterpart" in one_paragraph(err)  # positions mean nothing
    code, out, _ = cli(capsys, "--seq", seq, "--dist", dist, "--auto-relations", "--expect", "mm=Shard(0) of out")
    assert code == 0, out


CONST = '''
_tensor_constant0 = self._tensor_constant0
lift_fresh_copy: "f32[]" = torch.ops.aten.lift_fresh_copy.default(_tensor_constant0);  _tensor_constant0 = None
mul: "f32[{rows}, 16]" = torch.ops.aten.mul.Tensor(x, lift_fresh_copy);  x = lift_fresh_copy = None
return (mul,)'''


def test_constants_section_gives_dump_constants_their_values(tmp_path, capsys):
    seq = write(tmp_path / "seq", {"fw.g0.r0.py": dump('x: "f32[8, 16]"', CONST.format(rows=8))})
    dist = write(tmp_path / "dist", {f"fw.g0.r{r}.py": dump('x: "f32[4, 16]"', CONST.format(rows=4)) for r in (0, 1)})
    code, out, _ = cli(capsys, "--seq", seq, "--dist", dist, "--auto-relations")
    assert code == 2, out  # the constants' values are not in the dumps: opaque, so no proof
    rel = tmp_path / "rel.yaml"
    rel.write_text("constants:\n  _tensor_constant0: 0.5\n")
    code, out, _ = cli(capsys, "--seq", seq, "--dist", dist, "--auto-relations", "--relations", rel)
    assert code == 0, out
    rel.write_text("constants:\n  _tensor_constant0: {seq: 0.5, dist: 0.25}\n")
    code, out, _ = cli(capsys, "--seq", seq, "--dist", dist, "--auto-relations", "--relations", rel)
    assert code == 1, out


# ---------------------------------------------------------------- bad input: exit 3, file and line

@pytest.mark.parametrize("cut,needle", [
    ("mm.default(h, ", ":5: syntax error"),  # mid-statement
    ("return", ":5: the forward ends without a return statement"),  # at a line break
])
def test_truncated_dump(tmp_path, capsys, row_parallel, cut, needle):
    text = mlp(4)
    dist = write(tmp_path / "trunc", {"fw.g0.r0.py": text, "fw.g0.r1.py": text[:text.index(cut) + len(cut)]
                                      if cut != "return" else text[:text.index("        return")]})
    code, _, err = cli(capsys, "--seq", row_parallel[0], "--dist", dist, "--auto-relations")
    msg = one_paragraph(err)
    assert code == 3 and os.path.join(dist, "fw.g0.r1.py") + needle in msg and "truncated" in msg


def test_rank_files_missing_a_rank(tmp_path, capsys, row_parallel):
    dist = write(tmp_path / "gap", {"fw.g0.r0.py": mlp(4), "fw.g0.r2.py": mlp(4)})
    code, _, err = cli(capsys, "--seq", row_parallel[0], "--dist", dist, "--auto-relations")
    msg = one_paragraph(err)
    assert code == 3 and os.path.join(dist, "fw.g0.r2.py") in msg and "no file for rank 1" in msg


def test_ranks_with_different_inputs(tmp_path, capsys, row_parallel):
    other = mlp(4).replace('w: "f32[16, 4]"', 'w: "f32[16, 4]", b: "f32[4]"')
    dist = write(tmp_path / "differ", {"fw.g0.r0.py": mlp(4), "fw.g0.r1.py": other})
    code, _, err = cli(capsys, "--seq", row_parallel[0], "--dist", dist, "--auto-relations")
    msg = one_paragraph(err)
    assert code == 3 and f"rank 1 ({os.path.join(dist, 'fw.g0.r1.py')}:2) takes inputs x, w, b" in msg
    assert f"rank 0 ({os.path.join(dist, 'fw.g0.r0.py')}:2) takes x, w" in msg


def test_relations_naming_missing_inputs(tmp_path, capsys, row_parallel):
    rel = tmp_path / "rel.yaml"
    rel.write_text("inputs:\n  x: Shard(0)\n  bias: Replicate()\n")
    code, _, err = cli(capsys, "--seq", row_parallel[0], "--dist", row_parallel[1], "--relations", rel)
    assert code == 3 and f"{rel}:3: the relations name 'bias', which match no input" in one_paragraph(err)


def test_missing_relations_suggest_auto_relations(capsys, row_parallel):
    code, _, err = cli(capsys, "--seq", row_parallel[0], "--dist", row_parallel[1])
    assert code == 3 and "--auto-relations" in one_paragraph(err)


def test_single_device_side_must_be_one_rank(capsys, row_parallel):
    with pytest.raises(InputError, match="must be one graph, but 2 rank files"):
        prepare_dumps(row_parallel[1], row_parallel[1], auto_relations=True)


@pytest.mark.parametrize("args,needle", [
    (["src/shardproof/zoo/tp_mlp.py", "--seq", "a", "--dist", "b"], "not both"),
    (["--seq", "a"], "need both --seq"),
    (["--seq", "a", "--dist", "b", "--world-size", "2"], "--world-size applies to case files"),
    (["src/shardproof/zoo/tp_mlp.py", "--auto-relations"], "apply to graph dumps"),
    (["--seq", "a", "--dist", "b", "--expect", "mm"], "expected NAME=RELATION"),
    (["--seq", "a", "--dist", "b", "--plugin", "no_such_plugin_module"], "plugin no_such_plugin_module failed"),
    (["--no-such-flag"], "unrecognized arguments"),
])
def test_usage_errors_exit_3(capsys, args, needle):
    code, _, err = cli(capsys, *args)
    assert code == 3 and needle in err and "Traceback" not in err


def test_help_shows_dump_examples(capsys):
    with pytest.raises(SystemExit) as info:
        main(["verify", "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and "--seq" in out and "--auto-relations" in out and "--plugin" in out


# ---------------------------------------------------------------- unknown ops and plug-ins

def test_unknown_op_exit_2_names_op_and_line(tmp_path, capsys, row_parallel):
    odd = mlp(4, op="acme.frobnicate.default")
    dist = write(tmp_path / "odd", {"fw.g0.r0.py": odd, "fw.g0.r1.py": odd})
    code, out, _ = cli(capsys, "--seq", row_parallel[0], "--dist", dist, "--auto-relations")
    text = " ".join(out.split())
    assert code == 2 and "no rule for op acme.frobnicate" in text
    assert f"{os.path.join(dist, 'fw.g0.r0.py')}:4" in "".join(out.split())  # a long path may wrap


def test_plugin_declares_an_op():
    """Run in fresh processes: a plug-in's declarations are process-wide."""
    args = [sys.executable, "-m", "shardproof.cli", "verify", "--seq", os.path.join(PLUGIN_DUMPS, "tp1"),
            "--dist", os.path.join(PLUGIN_DUMPS, "tp2"), "--auto-relations"]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    without = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert without.returncode == 2 and "mylib.softcap" in without.stdout, without.stdout + without.stderr
    with_plugin = subprocess.run(args + ["--plugin", PLUGIN], capture_output=True, text=True, env=env, timeout=120)
    assert with_plugin.returncode == 0 and "VERIFIED" in with_plugin.stdout, with_plugin.stdout + with_plugin.stderr
