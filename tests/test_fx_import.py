"""Readable FX dump import (``print_readable()`` text -> Graph IR), without torch and
without executing anything from the file."""
import glob
import math
import os
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest

from shardproof.frontends import fx_text
from shardproof.frontends.fx_program import load_program
from shardproof.frontends.fx_text import DumpError, load_graph, parse_graph
from shardproof.ir.graph import Source, TensorType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHS = os.path.join(ROOT, "..", "shared", "graphs", "entangle")


def dump(body: str, params: str = 'x: "f32[8, 16]", w: "f32[16, 4]"', cls: str = "GraphModule") -> str:
    lines = "\n".join("        " + ln if ln.strip() else "        " for ln in body.strip("\n").splitlines())
    return (f"import torch\nfrom torch import device\n\nclass {cls}(torch.nn.Module):\n"
            f"    def forward(self, {params}):\n{lines}\n")


def err(text: str, **kw) -> DumpError:
    with pytest.raises(DumpError) as info:
        parse_graph(text, "t.py", **kw)
    return info.value


# ---------------------------------------------------------------- placeholders, types, op names

def test_inputs_ops_and_outputs():
    g = parse_graph(dump('''
mm: "f32[8, 4]" = torch.ops.aten.mm.default(x, w);  x = None
relu: "f32[8, 4]" = torch.ops.aten.relu(mm);  mm = None
return (relu, None, mm)
'''), "t.py")
    assert [n.name for n in g.inputs] == ["x", "w"]
    assert g.node("x").type == TensorType((8, 16), "f32") and g.node("x").op == "input"
    mm, relu = g.node("mm"), g.node("relu")
    assert mm.op == "aten.mm" and mm.args == (g.node("x"), g.node("w")) and mm.type == TensorType((8, 4), "f32")
    assert relu.op == "aten.relu" and relu.args == (mm,)
    assert g.outputs == {"out0": relu, "out2": mm}
    assert g.label == "t.py"


def test_single_output_and_list_return():
    g = parse_graph(dump('neg: "f32[8, 16]" = torch.ops.aten.neg.default(x)\nreturn neg'), "t.py")
    assert g.outputs == {"out": g.node("neg")}
    g = parse_graph(dump('neg: "f32[8, 16]" = torch.ops.aten.neg.default(x)\nreturn [neg, x]'), "t.py")
    assert g.outputs == {"out0": g.node("neg"), "out1": g.node("x")}


def test_annotations_with_strides_devices_and_dtypes():
    g = parse_graph(dump('return (a, b, c, d)', params='a: "f32[8, 16][16, 1]cpu", b: "bf16[4][1]cuda:0", '
                         'c: "b8[]", d: "i64[2, 3]"'), "t.py")
    assert g.node("a").type == TensorType((8, 16), "f32")
    assert g.node("b").type == TensorType((4,), "bf16")
    assert g.node("c").type == TensorType((), "b8")
    assert g.node("d").type == TensorType((2, 3), "i64")


def test_unannotated_placeholder_and_class_lambda():
    g = parse_graph(dump("return (x,)", params="x", cls="<lambda>"), "t.py")
    assert g.node("x").op == "input" and g.node("x").type is None


def test_literals_dtypes_and_dropped_kwargs():
    g = parse_graph(dump('''
full: "f32[2]" = torch.ops.aten.full.default([2], -inf, dtype = torch.float32, layout = torch.strided, device = device(type='cuda', index=0), pin_memory = False)
z: "i64[2]" = torch.ops.aten.zeros.default([2], dtype = torch.int64, device = device(type='cpu'))
c: "f32[8, 16]" = torch.ops.aten.clone.default(x, memory_format = torch.contiguous_format)
f: "f32[2]" = torch.ops.aten.fill.Scalar(full, nan)
g: "f32[2]" = torch.ops.aten.fill.Scalar(full, float('-inf'))
h: "f32[2]" = torch.ops.my.op.default(full, where = device(type='cuda', index=1), fmt = torch.channels_last, dt = torch.bool, t = (1, 2.5, True, None, 'sum'))
return (f, g, h, z, c)
'''), "t.py")
    full = g.node("full")
    assert full.args[0] == [2] and full.args[1] == -math.inf and full.kwargs == {"dtype": "f32"}
    assert g.node("z").kwargs == {"dtype": "i64"}
    assert g.node("c").kwargs == {}
    assert math.isnan(g.node("f").args[1]) and g.node("g").args[1] == -math.inf
    h = g.node("h")
    assert h.op == "my.op"
    assert h.kwargs == {"where": "cuda:1", "fmt": "torch.channels_last", "dt": "b8", "t": (1, 2.5, True, None, "sum")}


def test_dtype_table_matches_torch_capture():
    src = open(os.path.join(ROOT, "src", "shardproof", "frontends", "torch_capture.py")).read()
    for name, short in fx_text.TORCH_DTYPES.items():
        if name in ("float", "double", "half", "long", "int", "short"):
            continue  # aliases torch prints under their canonical names
        assert f"torch.{name}: \"{short}\"" in src


def test_symbolic_sizes():
    text = dump('v: "f32[2*s0, 768]" = torch.ops.aten.view.default(x, [-1, 768])\nreturn v',
                params='x: "f32[s0, 2, 384]", n: "Sym(s0)"')
    e = err(text)
    assert "'s0'" in str(e) and str(e).startswith("t.py:5:")
    g = parse_graph(text, "t.py", symbols={"s0": 4})
    assert g.node("x").type == TensorType((4, 2, 384), "f32")
    assert g.node("v").type == TensorType((8, 768), "f32")
    assert g.node("n").op == "constant" and g.node("n").kwargs == {"value": 4}


def test_sym_annotation_on_op_node_is_untyped():
    g = parse_graph(dump('''
sym_size_int: "Sym(s0)" = torch.ops.aten.sym_size.int(x, 0)
mul: "Sym(2*s0)" = sym_size_int * 2
v: "f32[8, 16]" = torch.ops.aten.view.default(x, [mul, -1])
return v
'''), "t.py")
    assert g.node("sym_size_int").type is None and g.node("sym_size_int").op == "aten.sym_size"
    mul = g.node("mul")
    assert mul.op == "mul" and mul.args == (g.node("sym_size_int"), 2)
    assert g.node("v").args[1] == [mul, -1]


# ---------------------------------------------------------------- getitem and multi-output ops

def test_getitem_types_fill_producer():
    g = parse_graph(dump('''
native_dropout = torch.ops.aten.native_dropout.default(x, 0.1, True);  x = None
getitem: "f32[8, 16]" = native_dropout[0]
getitem_1: "b8[8, 16]" = native_dropout[1];  native_dropout = None
max_1 = torch.ops.aten.max.dim(w, -1)
getitem_2: "f32[16]" = operator.getitem(max_1, 0)
split = torch.ops.aten.split.Tensor(w, 2)
getitem_3: "f32[2, 4]" = split[3]
return (getitem, getitem_1, getitem_2, getitem_3)
'''), "t.py")
    nd = g.node("native_dropout")
    assert nd.op == "aten.native_dropout" and nd.type == (TensorType((8, 16), "f32"), TensorType((8, 16), "b8"))
    gi = g.node("getitem_1")
    assert gi.op == "getitem" and gi.args == (nd, 1) and gi.type == TensorType((8, 16), "b8")
    assert g.node("max_1").type == (TensorType((16,), "f32"),)
    assert g.node("getitem_2").op == "getitem" and g.node("getitem_2").args == (g.node("max_1"), 0)
    assert g.node("split").type == (None, None, None, TensorType((2, 4), "f32"))


# ---------------------------------------------------------------- auto_functionalized

def test_auto_functionalized_v1():
    g = parse_graph(dump('''
empty_like: "f32[8, 16]" = torch.ops.aten.empty_like.default(x, pin_memory = False)
auto_functionalized = torch.ops.higher_order.auto_functionalized(torch.ops._C.rms_norm.default, result = empty_like, input = x, weight = w, epsilon = 1e-06);  empty_like = None
getitem_1: "f32[8, 16]" = auto_functionalized[1];  auto_functionalized = None
return (getitem_1,)
'''), "t.py")
    af = g.node("auto_functionalized")
    assert af.op == "_C.rms_norm" and af.args == ()
    assert af.kwargs == {"result": g.node("empty_like"), "input": g.node("x"), "weight": g.node("w"), "epsilon": 1e-06}
    assert af.type == (None, TensorType((8, 16), "f32"))
    assert g.node("getitem_1").args == (af, 1)


def test_auto_functionalized_v2_whole_base():
    g = parse_graph(dump('''
clone: "f32[8, 16]" = torch.ops.aten.clone.default(x)
auto_functionalized_v2 = torch.ops.higher_order.auto_functionalized_v2(torch.ops.tg.inplace_log_tensor.default, s = 'w', _t_base_index = 0, _all_bases = [clone]);  clone = None
getitem_1: "f32[8, 16]" = auto_functionalized_v2[1];  auto_functionalized_v2 = None
return (getitem_1,)
'''), "t.py")
    af = g.node("auto_functionalized_v2")
    assert af.op == "tg.inplace_log_tensor" and af.kwargs == {"s": "w", "t": g.node("clone")}
    assert af.type == (None, TensorType((8, 16), "f32"))
    assert g.node("getitem_1").op == "getitem" and g.node("getitem_1").args == (af, 1)


def test_auto_functionalized_v2_views_and_alias():
    g = parse_graph(dump('''
a: "f32[8, 16]" = torch.ops.aten.clone.default(x)
b: "f32[8, 16]" = torch.ops.aten.clone.default(x)
auto_functionalized_v2 = torch.ops.higher_order.auto_functionalized_v2(torch.ops.my.update.default, eps = 0.5, _out_base_index = 1, _out_alias = True, _acc_base_index = 0, _acc_slice_dim = 1, _acc_slice_start = 0, _acc_slice_end = 4, _extra_base_index = 0, _extra_size = [2, 16], _extra_stride = [16, 1], _extra_storage_offset = 32, _all_bases = [a, b])
ret: "f32[]" = auto_functionalized_v2[0]
getitem_1: "f32[8, 16]" = auto_functionalized_v2[1]
getitem_2: "f32[8, 16]" = auto_functionalized_v2[2]
return (ret, getitem_1, getitem_2)
'''), "t.py")
    af = g.node("auto_functionalized_v2")
    a, b = g.node("a"), g.node("b")
    assert af.op == "my.update" and list(af.kwargs) == ["eps", "out", "acc", "extra"]
    assert af.kwargs["out"] is b  # an alias of the base: the base itself
    acc, extra = af.kwargs["acc"], af.kwargs["extra"]
    assert acc.op == "aten.slice" and acc.args == (a, 1, 0, 4) and acc.type == TensorType((8, 4), "f32")
    assert extra.op == "aten.as_strided" and extra.args == (a, [2, 16], [16, 1], 32)
    assert extra.type == TensorType((2, 16), "f32")
    # v1 convention on the op node: 0 = return, then out, acc, extra
    assert af.type[0] == TensorType((), "f32") and af.type[2] == TensorType((8, 4), "f32")
    assert g.node("ret").args == (af, 0)
    # base 0 (a) is written through two views: scatter both back, the last keeps the dump's name
    g1 = g.node("getitem_1")
    assert g1.op == "aten.as_strided_scatter" and g1.type == TensorType((8, 16), "f32")
    inner = g1.args[0]
    assert inner.op == "aten.slice_scatter" and inner.args[0] is a and inner.args[2:] == (1, 0, 4)
    assert inner.args[1].op == "getitem" and inner.args[1].args == (af, 2)
    assert g1.args[1].args == (af, 3) and g1.args[2:] == ([2, 16], [16, 1], 32)
    # base 1 (b) is the whole `out` argument: plain getitem of output 1
    assert g.node("getitem_2").op == "getitem" and g.node("getitem_2").args == (af, 1)
    names = [n.name for n in g.nodes]
    assert len(names) == len(set(names))
    _check_topological(g)


def test_auto_functionalized_v2_list_argument():
    g = parse_graph(dump('''
a: "f32[8, 16]" = torch.ops.aten.clone.default(x)
b: "f32[8, 16]" = torch.ops.aten.clone.default(x)
auto_functionalized_v2 = torch.ops.higher_order.auto_functionalized_v2(torch.ops.my.foreach_.default, _xs_length = 2, _xs_0_base_index = 0, _xs_1_base_index = 1, _all_bases = [a, b])
getitem_2: "f32[8, 16]" = auto_functionalized_v2[2]
return (getitem_2,)
'''), "t.py")
    af = g.node("auto_functionalized_v2")
    assert af.kwargs == {"xs": [g.node("a"), g.node("b")]}
    gi = g.node("getitem_2")
    assert gi.op == "getitem" and gi.args[1] == 1 and gi.args[0].args == (af, 1)


# ---------------------------------------------------------------- source comments, constants

def test_file_comments_become_sources():
    g = parse_graph(dump('''
# File: /src/model.py:12 in forward, code: y = x @ w
mm: "f32[8, 4]" = torch.ops.aten.mm.default(x, w)
relu: "f32[8, 4]" = torch.ops.aten.relu.default(mm)

t: "f32[4, 8]" = torch.ops.aten.t.default(relu)
 # File: C:\\\\work\\\\m.py:7 in <lambda>, code: f(a, b)  # type: ignore[x]
neg: "f32[4, 8]" = torch.ops.aten.neg.default(t)
# No stacktrace found for following nodes
abs_1: "f32[4, 8]" = torch.ops.aten.abs.default(neg)
return abs_1
'''), "t.py")
    src = Source("/src/model.py", 12, "forward", "y = x @ w")
    assert g.node("mm").source == src and g.node("relu").source == src
    assert g.node("t").source is None
    assert g.node("neg").source == Source("C:\\\\work\\\\m.py", 7, "<lambda>", "f(a, b)  # type: ignore[x]")
    assert g.node("abs_1").source is None and g.node("x").source is None


def test_tensor_constants():
    g = parse_graph(dump('''
_tensor_constant0 = self._tensor_constant0
lift_fresh_copy: "i64[]" = torch.ops.aten.lift_fresh_copy.default(_tensor_constant0);  _tensor_constant0 = None
_tensor_constant1: "f32[3]" = self._tensor_constant1
add: "f32[3]" = torch.ops.aten.add.Tensor(_tensor_constant1, lift_fresh_copy)
return add
'''), "t.py")
    c0, c1 = g.node("_tensor_constant0"), g.node("_tensor_constant1")
    assert c0.op == "constant" and c0.kwargs == {"value": None} and c0.type == TensorType((), "i64")
    assert c1.op == "constant" and c1.type == TensorType((3,), "f32")
    lf = g.node("lift_fresh_copy")
    assert lf.op == "aten.lift_fresh_copy" and lf.args == (c0,)


CONSTANTS = '''
_tensor_constant0 = self._tensor_constant0
lift_fresh_copy: "i64[]" = torch.ops.aten.lift_fresh_copy.default(_tensor_constant0);  _tensor_constant0 = None
_tensor_constant1: "f32[3]" = self._tensor_constant1
add: "f32[3]" = torch.ops.aten.add.Tensor(_tensor_constant1, lift_fresh_copy)
return add
'''


def test_tensor_constant_values_given_by_the_caller():
    g = parse_graph(dump(CONSTANTS), "t.py", constants={"_tensor_constant0": 3, "_tensor_constant1": 0.5})
    c0, c1 = g.node("_tensor_constant0").kwargs["value"], g.node("_tensor_constant1").kwargs["value"]
    assert c0.dtype == np.int64 and c0.shape == () and c0 == 3  # typed by the lift_fresh_copy reading it
    assert c1.dtype == np.float64 and c1.tolist() == [0.5, 0.5, 0.5]
    assert "not an integer" in str(err(dump(CONSTANTS), constants={"_tensor_constant0": 0.5}))
    assert "must be a number" in str(err(dump(CONSTANTS), constants={"_tensor_constant0": "x"}))


def test_load_program_rejects_values_for_constants_it_lacks(tmp_path):
    (tmp_path / "fw.g0.r0.py").write_text(dump(CONSTANTS))
    with pytest.raises(DumpError, match="_tensor_constant7, which the program does not read"):
        load_program(str(tmp_path), constants={"_tensor_constant7": 1})


def test_nodes_know_the_dump_line_they_come_from():
    g = parse_graph(dump('neg: "f32[8, 16]" = torch.ops.aten.neg.default(x)\nreturn neg'), "t.py")
    assert g.node("neg").origin == Source("t.py", 6) and g.node("x").origin == Source("t.py", 5)


# ---------------------------------------------------------------- collectives

COLL = '''
all_reduce: "f32[8, 16]" = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '12')
wait_tensor: "f32[8, 16]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce)
ag: "f32[16, 16]" = torch.ops._c10d_functional.all_gather_into_tensor(wait_tensor, 2, 'dp')
v: "f32[8, 16]" = torch.ops.vllm.all_reduce.default(x, 'tp:0')
return (ag, v)
'''


def test_group_names_resolve():
    g = parse_graph(dump(COLL), "t.py", world_size=4)
    assert g.node("all_reduce").args == (g.node("x"), "sum", (0, 1, 2, 3))
    assert g.node("wait_tensor").args == (g.node("all_reduce"),)
    assert g.node("ag").op == "_c10d_functional.all_gather_into_tensor" and g.node("ag").args[-1] == (0, 1, 2, 3)
    assert g.node("v").args == (g.node("x"), (0, 1, 2, 3))
    g = parse_graph(dump(COLL), "t.py", groups={"12": (0, 1), "dp": [(0, 2), (1, 3)]}, world_size=4, rank=3)
    assert g.node("all_reduce").args[-1] == (0, 1)
    assert g.node("ag").args[-1] == (1, 3)
    g = parse_graph(dump(COLL), "t.py")
    assert g.node("all_reduce").args[-1] == "12" and g.node("v").args[-1] == "tp:0"


# ---------------------------------------------------------------- joint graphs

def test_joint_graph_inputs_and_tree_unflatten():
    text = '''
class joint_helper(torch.nn.Module):
    def forward(self, primals, tangents):
        primals_1: "f32[4]"; tangents_1: "f32[4]";

        primals_1, tangents_1, = fx_pytree.tree_flatten_spec([primals, tangents], self._in_spec)
        mul: "f32[4]" = torch.ops.aten.mul.Tensor(tangents_1, primals_1)
        return pytree.tree_unflatten([mul, None], self._out_spec)
'''
    g = parse_graph(text, "t.py")
    assert [(n.name, n.type) for n in g.inputs] == [("primals_1", TensorType((4,), "f32")),
                                                    ("tangents_1", TensorType((4,), "f32"))]
    assert g.outputs == {"out0": g.node("mul")}


# ---------------------------------------------------------------- errors

def test_error_truncated_file():
    text = dump('mm: "f32[8, 4]" = torch.ops.aten.mm.default(x, w)\nreturn mm')
    e = err(text[: text.index("(x, w)") + 3])
    assert str(e).startswith("t.py:6:") and "syntax" in str(e)
    assert isinstance(e.line, int) and e.file == "t.py"


def test_error_undefined_name():
    e = err(dump('mm: "f32[8, 4]" = torch.ops.aten.mm.default(x, nope)\nreturn mm'))
    assert str(e).startswith("t.py:6:") and "undefined name 'nope'" in str(e)
    e = err(dump('mm: "f32[8, 4]" = torch.ops.aten.mm.default(x, w)\nreturn (mm, ghost)'))
    assert str(e).startswith("t.py:7:") and "'ghost'" in str(e)
    e = err(dump('g: "f32[8]" = nope[0]\nreturn g'))
    assert "undefined name 'nope'" in str(e)


@pytest.mark.parametrize("ann", ["f32[8, ", "f32", "Tensor[8]", "f32[8, x y]", "f32[8][", "f32[8]][", "f32[-3]"])
def test_error_bad_annotation(ann):
    e = err(dump(f'mm: "{ann}" = torch.ops.aten.neg.default(x)\nreturn mm'))
    assert str(e).startswith("t.py:6:")
    e = err(dump("return x", params=f'x: "{ann}"'))
    assert str(e).startswith("t.py:5:")


@pytest.mark.parametrize("body,needle", [
    ('mm: "f32[8]" = torch.ops.aten.neg.default(x)\nmm: "f32[8]" = torch.ops.aten.neg.default(x)', "defined twice"),
    ("for i in range(3):\n    pass", "unsupported statement"),
    ('y: "f32[8]" = x.neg()', "unsupported call"),
    ('y: "f32[8]" = torch.ops.aten.add.Tensor(x, lambda: 1)', "unsupported argument"),
    ('y: "f32[8]" = torch.ops.aten.neg.default(x, **w)', "unsupported **kwargs"),
    ('y = torch.ops.higher_order.auto_functionalized(x, a = w)', "expected torch.ops"),
    ('y = torch.ops.higher_order.auto_functionalized_v2(torch.ops.a.b.default, _t_base_index = 3, _all_bases = [x])',
     "_all_bases"),
    ('y = torch.ops.higher_order.auto_functionalized_v2(torch.ops.a.b.default, _t_base_index = 0, _all_bases = [x])\n'
     'z: "f32[8]" = y[2]', "bases"),
    ('y: "f32[8]" = torch.ops.aten(x)', "op name"),
    ("a, b = x", "unsupported assignment target"),
])
def test_error_unsupported(body, needle):
    e = err(dump(body + "\nreturn x"))
    assert str(e).startswith("t.py:") and needle in str(e), str(e)


def test_error_no_forward():
    e = err("import torch\nx = 1\n")
    assert str(e).startswith("t.py:1:") and "forward" in str(e)


def test_error_never_anything_else():
    """Every prefix of a dump, and line-level garbling, gives a Graph or a DumpError."""
    text = dump('''
# File: /src/model.py:12 in forward, code: y = x @ w
mm: "f32[8, 4]" = torch.ops.aten.mm.default(x, w);  x = None
native_dropout = torch.ops.aten.native_dropout.default(mm, 0.1, True)
getitem: "f32[8, 4]" = native_dropout[0]
all_reduce: "f32[8, 4]" = torch.ops._c10d_functional.all_reduce.default(getitem, 'sum', '0')
auto_functionalized = torch.ops.higher_order.auto_functionalized(torch.ops._C.rms_norm.default, result = mm, input = all_reduce, weight = w, epsilon = 1e-06)
getitem_1: "f32[8, 4]" = auto_functionalized[1]
return (getitem_1, None)
''')
    outcomes = Counter()
    for i in range(len(text) + 1):
        try:
            parse_graph(text[:i], "t.py", world_size=2)
            outcomes["ok"] += 1
        except DumpError as e:
            assert str(e).startswith("t.py:")
            outcomes["err"] += 1
    lines = text.splitlines()
    for i in range(len(lines)):
        for junk in ("", "@@@", "        x", "        y: \"f32[\" = 1", "        q = torch.ops.a.b(z)", "\x00"):
            try:
                parse_graph("\n".join(lines[:i] + [junk] + lines[i + 1:]), "t.py")
            except DumpError:
                pass
    assert outcomes["err"] > 0 and outcomes["ok"] > 0


def test_load_errors(tmp_path):
    with pytest.raises(DumpError, match="cannot read"):
        load_graph(str(tmp_path / "missing.py"))
    (tmp_path / "bin.r0.py").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DumpError, match="bin.r0.py"):
        load_graph(str(tmp_path / "bin.r0.py"))


# ---------------------------------------------------------------- programs

def _write_ranks(d, kind, ranks, group="'0'"):
    for r in ranks:
        body = f'ar: "f32[8, 16]" = torch.ops._c10d_functional.all_reduce.default(x, \'sum\', {group})\nreturn ar'
        (d / f"{kind}.g0.r{r}.py").write_text(dump(body))


def test_load_program_directory_and_list(tmp_path):
    _write_ranks(tmp_path, "fw", [0, 1, 2])
    _write_ranks(tmp_path, "bw", [0, 1, 2])
    gs = load_program(str(tmp_path))
    assert len(gs) == 3 and gs[0].label.startswith("rank 0")
    assert gs[2].node("ar").args[-1] == (0, 1, 2)
    gs = load_program(str(tmp_path), kind="bw", groups={"0": (0, 1)})
    assert gs[1].node("ar").args[-1] == (0, 1)
    files = [str(tmp_path / f"fw.g0.r{r}.py") for r in (2, 0, 1)]
    gs = load_program(files)
    assert [g.label.split(" (")[0] for g in gs] == ["rank 0", "rank 1", "rank 2"]
    with pytest.raises(DumpError, match="no both"):
        load_program(str(tmp_path), kind="both")


def test_load_program_rank_mismatch(tmp_path):
    _write_ranks(tmp_path, "fw", [0, 2])
    with pytest.raises(DumpError, match="not 0..1"):
        load_program(str(tmp_path))
    with pytest.raises(DumpError, match="twice"):
        load_program([str(tmp_path / "fw.g0.r0.py")] * 2)


# ---------------------------------------------------------------- hygiene

def test_module_never_executes_or_needs_torch():
    src = open(fx_text.__file__).read()
    for banned in ("exec(", "eval(", "import torch", "from torch", "import pickle", "pickle.load", "__import__", "importlib"):
        assert banned not in src, banned
    code = ("import sys; sys.modules['torch'] = None; import shardproof.frontends.fx_text as m; "
            "g = m.parse_graph(sys.argv[1]); print(len(g.nodes))")
    out = subprocess.run([sys.executable, "-c", code, dump('n: "f32[8, 16]" = torch.ops.aten.neg.default(x)\nreturn n')],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"


def test_dump_code_is_not_run(tmp_path):
    marker = tmp_path / "ran"
    text = dump('y: "f32[8]" = torch.ops.aten.neg.default(x)\nreturn y') + \
        f"\nopen({str(marker)!r}, 'w').write('x')\n"
    parse_graph(text, "t.py")
    assert not marker.exists()


# ---------------------------------------------------------------- the real dumps

def _check_topological(g):
    seen = set()
    for n in g.nodes:
        if n.op != "input":
            for i in n.inputs:
                assert i in seen, f"{g.label}: {n.name} reads {i.name} before it is defined"
        seen.add(n)
    for out in g.outputs.values():
        assert out in seen


def _dump_dirs():
    if not os.path.isdir(GRAPHS):
        pytest.skip(f"../shared/graphs absent: {os.path.normpath(GRAPHS)} not found")
    dirs = sorted({os.path.dirname(p) for p in glob.glob(os.path.join(GRAPHS, "*", "*", "*.py"))})
    if not dirs:
        pytest.skip(f"../shared/graphs absent: no *.py dumps under {os.path.normpath(GRAPHS)}")
    return dirs


def test_all_real_dumps_parse():
    from shardproof.ops.registry import lookup
    unknown, total, slowest = Counter(), 0, (0.0, "")
    for d in _dump_dirs():
        kinds = sorted({os.path.basename(p).split(".", 1)[0] for p in glob.glob(os.path.join(d, "*.r*.py"))})
        for kind in kinds:
            t0 = time.perf_counter()
            graphs = load_program(d, kind=kind)
            dt = (time.perf_counter() - t0) / len(graphs)
            slowest = max(slowest, (dt, f"{os.path.relpath(d, GRAPHS)}/{kind}"))
            for g in graphs:
                total += 1
                assert len(g.nodes) > len(g.inputs) > 0
                assert g.outputs
                _check_topological(g)
                for n in g.nodes:
                    if n.op.startswith("_c10d_functional.") and n.op != "_c10d_functional.wait_tensor":
                        assert isinstance(n.args[-1], tuple) and n.args[-1] == tuple(range(len(graphs)))
                    if n.op not in ("input", "constant") and lookup(n.op) is None:
                        unknown[n.op] += 1
    assert total >= 1
    print(f"\nparsed {total} rank graphs; slowest per rank: {slowest[1]} {slowest[0] * 1000:.1f} ms")
    print("ops the registry lacks:", ", ".join(f"{op} x{c}" for op, c in unknown.most_common()) or "none")


def test_real_dump_details():
    _dump_dirs()
    gpt = os.path.join(GRAPHS, "gpt", "paral2_layer1")
    if os.path.isdir(gpt):
        g0, g1 = load_program(gpt)
        assert g0.outputs["out0"].name == "div_2" and g1.outputs["out0"].name == "div_2"
        assert g0.node("primals_1").type == TensorType((49152, 768), "f32")
        ln = g0.node("fused_layer_norm_affine_fwd")
        assert ln.op == "apex.fused_layer_norm_affine_fwd" and len(ln.type) == 3
        assert ln.source is not None and ln.source.line > 0
        assert g0.node("_tensor_constant0").op == "constant"
    qwen = os.path.join(GRAPHS, "qwen2", "paral2_layer1")
    if os.path.isdir(qwen):
        g0 = load_program(qwen)[0]
        assert g0.outputs["out0"].name == "getitem_34"
        assert g0.node("auto_functionalized_3").op == "_C.fused_add_rms_norm"
    bw = os.path.join(GRAPHS, "bug_missing_layernorm_allreduce", "tp2.bug")
    if os.path.isdir(bw):
        g0 = load_program(bw, kind="bw")[0]
        assert g0.node("getitem_58").op == "getitem"
