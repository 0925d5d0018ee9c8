"""XLA HLO text import: ops, shapes, sources, replica groups per rank, and bad input as a
DumpError (file:line), never a traceback."""
import numpy as np
import pytest

from shardproof.api import verify_dumps
from shardproof.cli import main
from shardproof.frontends.fx_text import DumpError
from shardproof.frontends.hlo_text import is_hlo_text, load_hlo_program, parse_hlo
from shardproof.ir.graph import TensorType

MLP = """HloModule mlp, entry_computation_layout={(f32[4,8]{1,0}, f32[8,6]{1,0}, f32[6,8]{1,0})->f32[4,8]{1,0}}

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(%a, %b)
}

ENTRY %main (x: f32[4,8], w1: f32[8,6], w2: f32[6,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0), metadata={op_name="x"}
  %w1 = f32[8,W1]{1,0} parameter(1)
  %w2 = f32[W2,8]{1,0} parameter(2)
  %h = f32[4,W1]{1,0} dot(%x, %w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="dot" source_file="mlp.py" source_line=7}
  %t = f32[4,W1]{1,0} tanh(%h)
  %y = f32[4,8]{1,0} dot(%t, %w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={source_file="mlp.py" source_line=8}
  ROOT %r = f32[4,8]{1,0} REDUCE
}
"""


def mlp(width: int, reduce: str = "all-reduce(%y), replica_groups={{0,1}}, to_apply=%sum") -> str:
    return MLP.replace("W1", str(width)).replace("W2", str(width)).replace("REDUCE", reduce)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_detects_hlo_text():
    assert is_hlo_text("\n  HloModule m, x=1\n")
    assert not is_hlo_text("class GraphModule(torch.nn.Module):")


def test_ops_types_sources_and_outputs():
    g0, g1 = load_hlo_program(mlp(3), filename="mlp.hlo")
    assert [n.name for n in g0.inputs] == ["x", "w1", "w2"]
    assert g0.node("w1").type == TensorType((8, 3), "f32")
    h = g0.node("h")
    assert h.op == "xla.dot_general" and h.args[2:] == ([], [], [1], [0])
    assert (h.source.file, h.source.line) == ("mlp.py", 7)
    assert (h.origin.file, h.origin.line) == ("mlp.hlo", 13)
    assert g0.node("t").op == "aten.tanh"
    r = g1.node("r")
    assert r.op == "_c10d_functional.all_reduce" and r.args[1:] == ("sum", (0, 1))
    assert list(g0.outputs) == ["out0"] and g0.outputs["out0"].args[0] is g0.node("r")


def test_world_size_from_groups_or_given():
    assert len(load_hlo_program(mlp(3), filename="m.hlo")) == 2
    graphs = load_hlo_program(mlp(3, "all-reduce(%y), replica_groups={{0,1},{2,3}}, to_apply=%sum"),
                              filename="m.hlo")
    assert [g.node("r").args[-1] for g in graphs] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    graphs = load_hlo_program(mlp(3, "all-reduce(%y), replica_groups={}, to_apply=%sum"), 3, filename="m.hlo")
    assert [g.node("r").args[-1] for g in graphs] == [(0, 1, 2)] * 3
    iota = load_hlo_program(mlp(3, "all-reduce(%y), replica_groups=[2,2]<=[2,2]T(1,0), to_apply=%sum"),
                            filename="m.hlo")
    assert [g.node("r").args[-1] for g in iota] == [(0, 2), (1, 3), (0, 2), (1, 3)]


def test_literals_tuples_and_stack_sources():
    text = """HloModule t

ENTRY %e (p: f32[3]) -> (f32[3], f32[2,2]) {
  %p = f32[3]{0} parameter(0)
  %c = f32[2,2]{1,0} constant({ {1, 2}, {3, -inf} })
  %e = f32[3]{0} constant({...})
  %s = f32[] constant(0.5)
  %m = f32[3]{0} multiply(%p, %e), metadata={op_type="mul" source_file="/lib/site-packages/x.py\\n----\\n[\\'/app/main.py:10\\', \\'/app/model.py:42\\', \\'/lib/site-packages/helper.py:7\\']" source_line=10}
  %t = (f32[3]{0}, f32[2,2]{1,0}) tuple(%m, %c)
  %g = f32[3]{0} get-tuple-element(%t), index=0
  ROOT %r = (f32[3]{0}, f32[2,2]{1,0}) tuple(%g, %c)
}
"""
    g, = load_hlo_program(text, filename="t.hlo")
    assert np.array_equal(g.node("c").kwargs["value"], [[1, 2], [3, -np.inf]])
    assert g.node("e").kwargs["value"] is None and g.node("s").kwargs["value"] == 0.5
    src = g.node("m").source
    assert (src.file, src.line) == ("/app/model.py", 42) and "main.py:10" in src.code
    assert g.outputs["out0"].args[0] is g.node("m") and g.outputs["out1"].args[0] is g.node("c")


def test_unknown_opcode_and_custom_call_give_unknown(tmp_path):
    seq = write(tmp_path, "s.hlo", mlp(6, "cbrt(%y)"))
    dist = write(tmp_path, "d.hlo", mlp(3, "cbrt(%y)"))
    rel = write(tmp_path, "r.yaml", "w1: Shard(1)\nw2: Shard(0)\nx: Replicate()\n")
    report = verify_dumps(seq, dist, rel, world_size=2)
    assert report.status == "unknown" and "hlo.cbrt" in report.reason and "s.hlo:16" in report.reason
    seq = write(tmp_path, "s2.hlo", mlp(6, 'custom-call(%y), custom_call_target="MyFusedThing"'))
    report = verify_dumps(seq, seq, rel)
    assert report.status == "unknown" and "custom_call.MyFusedThing" in report.reason


def test_cli_verifies_and_catches_a_missing_all_reduce(tmp_path, capsys):
    seq = write(tmp_path, "s.hlo", mlp(6, "all-reduce(%y), replica_groups={{0}}, to_apply=%sum"))
    good = write(tmp_path, "d.hlo", mlp(3))
    bad = write(tmp_path, "b.hlo", mlp(3, "copy(%y)"))
    rel = write(tmp_path, "r.yaml", "inputs:\n  w1: Shard(1)\n  w2: Shard(0)\n  x: Replicate()\n"
                                    "expect:\n  out0: Replicate()\n")
    assert main(["verify", "--seq", seq, "--dist", good, "--relations", rel]) == 0
    assert main(["verify", "--seq", seq, "--dist", bad, "--relations", rel, "--world-size", "2"]) == 1
    assert main(["verify", "--seq", seq, "--dist", bad, "--relations", rel]) == 3  # one rank: shapes cannot match
    capsys.readouterr()


@pytest.mark.parametrize("text, needle", [
    ("HloModule m\n\nENTRY %e () -> f32[] {\n  %c = f32[] constant(1)\n", "not closed"),
    ("HloModule m\n\n%f (a: f32[]) -> f32[] {\n  ROOT %a = f32[] parameter(0)\n}\n", "no ENTRY"),
    ("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] add(%x, %x)\n}\n", "not defined before"),
    ("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %c = f33[] constant(1)\n}\n", "unknown element type"),
    ("HloModule m\nENTRY %e () -> f32[2] {\n  ROOT %c = f32[2]{0} constant({1, 2, 3})\n}\n", "3 values"),
    ("HloModule m\nENTRY %e (p: f32[2]) -> f32[2] {\n  %p = f32[2]{0} parameter(0)\n  ROOT %c = f32[2]{0} "
     "all-reduce(%p), replica_groups={{0,1},{1,2}}, to_apply=%nope\n}\n", "calls computation"),
    ("def forward(self): pass\n", "not an HLO module"),
])
def test_errors_name_file_and_line(text, needle):
    with pytest.raises(DumpError) as err:
        load_hlo_program(text, filename="bad.hlo")
    assert needle in str(err.value) and str(err.value).startswith("bad.hlo")


def test_every_prefix_and_garbling_is_a_graph_or_a_dump_error():
    text = mlp(3)
    for cut in range(0, len(text), 7):
        try:
            load_hlo_program(text[:cut], filename="cut.hlo")
        except DumpError:
            pass
    lines = text.splitlines()
    for i in range(len(lines)):
        for garble in ("}", "(", "%", lines[i][: len(lines[i]) // 2], lines[i].replace("=", "")):
            try:
                load_hlo_program("\n".join(lines[:i] + [garble] + lines[i + 1:]), filename="g.hlo")
            except DumpError:
                pass


def test_parse_keeps_computations():
    m = parse_hlo(mlp(3), "m.hlo")
    assert m.entry == "main" and set(m.computations) == {"sum", "main"} and m.group_size() == 2


PAD = """HloModule padded

ENTRY %main (x: f32[4,C]) -> f32[6,C2] {
  %x = f32[4,C]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %p = f32[6,CP]{1,0} pad(%x, %zero), padding=1_1xPADCOL
  ROOT %e = f32[6,CP]{1,0} exponential(%p)
}
"""


def _pad(cols: int, padcol: str = "0_0") -> str:
    lo, hi = (int(v) for v in padcol.split("_"))
    return (PAD.replace("PADCOL", padcol).replace("CP", str(cols + lo + hi)).replace("C2", str(cols + lo + hi))
            .replace("C", str(cols)))


def test_edge_padding_commutes_with_sharding_of_another_dim(tmp_path):
    """Rows padded with zeros on every rank of a column-sharded x: a Shard(1) of the padded
    single-device tensor; padding the sharded dim on each rank is not."""
    seq = write(tmp_path, "seq.hlo", _pad(8))
    rel = write(tmp_path, "rel.yaml", "inputs:\n  x: Shard(1)\nexpect:\n  out0: Shard(1)\n")
    report = verify_dumps(seq, write(tmp_path, "dist.hlo", _pad(4)), relations_file=rel, world_size=2)
    assert report.status == "verified", report.reason
    wrong = verify_dumps(seq.replace("seq", "seq"), write(tmp_path, "wrong.hlo", _pad(4, "1_0")),
                         relations_file=write(tmp_path, "rel2.yaml", "inputs:\n  x: Shard(1)\n"), world_size=2)
    assert wrong.status != "verified"


def test_pad_numerics_match_numpy():
    from shardproof.ops.registry import lookup
    x = np.arange(6.0).reshape(2, 3)
    got = lookup("xla.pad").numerics(x, 7.0, "1_0x-1_2")
    assert np.array_equal(got, np.pad(x[:, 1:], [(1, 0), (0, 2)], constant_values=7.0))
