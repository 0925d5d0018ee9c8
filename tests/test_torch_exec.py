"""The independent executor (``frontends/torch_exec``): graph dumps, HLO and StableHLO run
with torch's own kernels and the collectives computed across ranks. For every dump and XLA
fixture the repo verifies, the executed outputs hold the proved output relations and agree
with the numpy numerics (a cross-check of both); the buggy twins' outputs break the
relation their correct twin holds."""
import os

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from hlo_llama import llama_hlo, llama_relations  # noqa: E402
from shardproof.api import prepare_dumps, verify_prepared  # noqa: E402
from shardproof.engine.numeric import evaluate  # noqa: E402
from shardproof.frontends.fx_text import parse_graph  # noqa: E402
from shardproof.frontends.torch_exec import (NotExecutable, draw_inputs, draw_program_inputs,  # noqa: E402
                                             estimate_bytes, execute)
from shardproof.ir.graph import DistributedProgram  # noqa: E402
from shardproof.relations.spec import Partial, held, parse_relation  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHS = os.path.join(ROOT, "..", "shared", "graphs", "entangle")
DATA = os.path.join(ROOT, "tests", "data")


def shared(*parts):
    path = os.path.join(GRAPHS, *parts)
    if not os.path.isdir(path):
        pytest.skip(f"../shared/graphs absent: {os.path.normpath(path)} not found")
    return path


# ---------------------------------------------------------------- relation checks on values


def _close(a, b, tol) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))


def holds(rel, s_val, vals, tol) -> bool:
    """Whether the ranks' values relate to the single-device value as `rel` says."""
    s_val = np.asarray(s_val, dtype=np.float64)
    if isinstance(rel, Partial):
        total = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}[rel.op](np.stack(vals), 0)
        return _close(total, s_val, tol)
    return all(_close(v, held(s_val, rel.layout(s_val.shape, r, len(vals))), tol) for r, v in enumerate(vals))


def broken_outputs(seq, dist, bindings, relations: dict, seed: int, tol: float) -> list[str]:
    """Outputs whose executed values break their relation (name -> Relation)."""
    s_in, d_in = draw_program_inputs(seq, dist, bindings, seed)
    s_out, d_out = execute(seq, dist, s_in, d_in)
    return [name for name, rel in relations.items()
            if not holds(rel, s_out[name], [d[name] for d in d_out], tol)]


def numpy_disagreement(seq, dist, bindings, seed: int) -> float:
    """The largest relative difference between torch's and the numpy numerics' outputs,
    over both programs (float64, both sides rounding to a low-precision float where a cast asks:
    the numerics model casts exactly, ops/casts.py)."""
    s_in, d_in = draw_program_inputs(seq, dist, bindings, seed)
    s_out, d_out = execute(seq, dist, s_in, d_in, round_low_precision="casts")
    s_env, d_envs = evaluate(seq, dist, s_in, d_in)
    worst = 0.0
    for graph, env, out in [(seq, s_env, s_out)] + [(g, e, o) for g, e, o in zip(dist.graphs, d_envs, d_out)]:
        for name, node in graph.outputs.items():
            a, b = np.asarray(env[node], dtype=np.float64), np.asarray(out[name], dtype=np.float64)
            assert a.shape == b.shape, (name, a.shape, b.shape)
            worst = max(worst, float(np.nanmax(np.abs(a - b) / (1 + np.abs(b)), initial=0.0)))
    return worst


def proved(report) -> dict:
    assert report.status == "verified", report.reason
    return {o.name: parse_relation(o.holds) for o in report.outputs}


def check_correct(p, tol=1e-7, seeds=(0, 1)):
    relations = proved(verify_prepared(p))
    for seed in seeds:
        assert broken_outputs(p.seq, p.dist, p.bindings, relations, seed, tol) == []
        assert numpy_disagreement(p.seq, p.dist, p.bindings, seed) < 1e-9
    return relations


def check_buggy(p, relations, tol=1e-7, seeds=(0, 1)):
    report = verify_prepared(p)
    assert report.status == "violation", report.reason
    broken = set()
    for seed in seeds:
        broken.update(broken_outputs(p.seq, p.dist, p.bindings, relations, seed, tol))
        assert numpy_disagreement(p.seq, p.dist, p.bindings, seed) < 1e-9
    assert broken, "the buggy program's executed outputs hold every relation"
    return sorted(broken)


# ---------------------------------------------------------------- HLO (generated transformers-neuronx Llama)


def _llama(tmp_path, tp, bug=None, layers=1):
    seq, dist, rel = tmp_path / "seq.hlo", tmp_path / f"dist{tp}{bug}.hlo", tmp_path / "rel.yaml"
    seq.write_text(llama_hlo(1, layers))
    dist.write_text(llama_hlo(tp, layers, bug=bug))
    rel.write_text(yaml.safe_dump(llama_relations(layers)))
    return prepare_dumps(str(seq), str(dist), str(rel))


F16 = 2e-2  # the f16 hidden states round at their casts: one ulp flips between the programs


@pytest.mark.parametrize("tp, layers", [(2, 1), (4, 1), (2, 2)])
def test_hlo_llama_executes_to_the_proved_relations(tmp_path, tp, layers):
    relations = check_correct(_llama(tmp_path, tp, layers=layers), tol=F16)
    assert {k: str(v) for k, v in relations.items()} == {"out0": "Shard(0)", **{
        f"out{i}": "Shard(2)" for i in range(1, 2 * layers + 1)}}


@pytest.mark.parametrize("bug, tp, broken", [("k_from_q", 2, ["out0", "out1"]), ("no_allreduce", 4, ["out0"]),
                                             # the swapped rotation reaches the key cache; this program's
                                             # logits come out the same (executed: equal to 1e-14)
                                             ("rope_swap", 2, ["out1"])])
def test_hlo_llama_bugs_break_the_relations_when_executed(tmp_path, bug, tp, broken):
    relations = proved(verify_prepared(_llama(tmp_path, tp)))
    assert check_buggy(_llama(tmp_path, tp, bug), relations, tol=F16) == broken


def test_low_precision_casts_round_like_torch(tmp_path):
    # f16 casts round: the executed values differ from the float64-throughout numerics by
    # about an f16 ulp, and rounding every f16 node differs more again
    p = _llama(tmp_path, 2)
    s_in, d_in = draw_program_inputs(p.seq, p.dist, p.bindings, 0)
    runs = {mode: execute(p.seq, p.dist, s_in, d_in, round_low_precision=mode)[0]["out1"]
            for mode in ("none", "casts", "every")}
    gap = np.abs(runs["casts"] - runs["none"]).max()
    assert 1e-5 < gap < 1e-1
    assert not np.array_equal(runs["every"], runs["casts"])


# ---------------------------------------------------------------- StableHLO (stored shard_map lowering)


def _stablehlo(tmp_path, dropped=False, expect=None):
    dist = os.path.join(DATA, "tp_attention.shard_map.mlir")
    if dropped:
        with open(dist, encoding="utf-8") as f:
            text = f.read()
        dist = tmp_path / "dropped.mlir"
        dist.write_text(text.replace("sdy.return %25 :", "sdy.return %24 :"))
    return prepare_dumps(os.path.join(DATA, "tp_attention.single.mlir"), dist, auto_relations=True, expect=expect)


def test_stablehlo_attention_executes_to_the_proved_relation(tmp_path):
    assert {k: str(v) for k, v in check_correct(_stablehlo(tmp_path)).items()} == {"out0": "Replicate()"}


def test_stablehlo_dropped_all_reduce_is_a_partial_sum_when_executed(tmp_path):
    relations = proved(verify_prepared(_stablehlo(tmp_path)))
    assert check_buggy(_stablehlo(tmp_path, True, {"out0": "Replicate()"}), relations) == ["out0"]
    # what the proof says the dropped program computes instead holds on the executed values
    p = _stablehlo(tmp_path, True)
    p.partial_ok = ("out0",)  # a partial output is verified only where allowed (engine/partial_outputs.py)
    assert {k: str(v) for k, v in check_correct(p).items()} == {"out0": 'Partial("sum")'}


# ---------------------------------------------------------------- FX dumps


def test_small_qwen2_dumps_execute_with_the_vllm_ops(monkeypatch):
    from test_qwen2_dump import Config, verify_small
    report, (seq, dist, bindings, _) = verify_small(Config(), 2)
    relations = proved(report)
    for seed in (0, 1):
        assert broken_outputs(seq, dist, bindings, relations, seed, 1e-7) == []
        assert numpy_disagreement(seq, dist, bindings, seed) < 1e-9
    # attention computed a few query rows at a time (as for the real dump's 32768 tokens) gives
    # the same values
    s_in, d_in = draw_program_inputs(seq, dist, bindings, 0)
    whole = execute(seq, dist, s_in, d_in)
    from shardproof.frontends import torch_exec_ops
    monkeypatch.setattr(torch_exec_ops, "ATTENTION_BLOCK", 2 * 4 * 6)  # 2 rows of 4 heads x 6 tokens
    blocks = execute(seq, dist, s_in, d_in)
    for a, b in zip([whole[0]] + whole[1], [blocks[0]] + blocks[1]):
        assert all(np.allclose(a[k], b[k], rtol=1e-12, atol=1e-12) for k in a)
    for bug in ("key_reads_query", "vocab_range", "missing_all_reduce"):
        report, (seq, dist, bindings, _) = verify_small(Config(), 2, bug)
        assert report.status == "violation"
        broken = [broken_outputs(seq, dist, bindings, relations, seed, 1e-7) for seed in (0, 1)]
        assert list(relations) in broken, bug


def test_row_parallel_dump(tmp_path):
    from test_dump_cli import mlp, write
    seq = write(tmp_path / "tp1", {"fw.g0.r0.py": mlp(8)})
    dist = write(tmp_path / "tp2", {"fw.g0.r0.py": mlp(4), "fw.g0.r1.py": mlp(4)})
    relations = check_correct(prepare_dumps(seq, dist, auto_relations=True))
    assert {k: str(v) for k, v in relations.items()} == {"mm": "Shard(0)"}
    # rank 1 applies another activation: its rows differ
    bad = write(tmp_path / "bad", {"fw.g0.r0.py": mlp(4), "fw.g0.r1.py": mlp(4, "aten.gelu.default")})
    assert check_buggy(prepare_dumps(seq, bad, auto_relations=True), relations) == ["mm"]


def test_grad_accumulation_dumps(tmp_path):
    from test_dump_cli import GRAD_ACC_YAML, fixed_grad_accumulation
    one = shared("bug_grad_accumulation", "1step")
    relations = check_correct(prepare_dumps(one, fixed_grad_accumulation(tmp_path), GRAD_ACC_YAML))
    bug = prepare_dumps(one, shared("bug_grad_accumulation", "2step.bug"), GRAD_ACC_YAML)
    assert check_buggy(bug, relations) == ["add_1"]


# ---------------------------------------------------------------- semantics the executor must keep


def _fx(params: str, body: str) -> str:
    lines = "".join(f"        {ln}\n" for ln in body.strip("\n").splitlines())
    return f"class GraphModule(torch.nn.Module):\n    def forward(self, {params}):\n{lines}"


def _one(text: str):
    g = parse_graph(text, "g.py", world_size=1)
    return g, DistributedProgram([parse_graph(text, "g.py", world_size=1)])


def test_casts_change_values_as_torch_casts_do():
    g, d = _one(_fx('x: "f32[6]"', '''
i: "i64[6]" = torch.ops.aten._to_copy.default(x, dtype=torch.int64)
b: "bf16[6]" = torch.ops.aten._to_copy.default(x, dtype=torch.bfloat16)
return (i, b)'''))
    x = np.array([-1.7, -0.5, 0.4, 1.5, 2.9, 1 + 2 ** -12])
    out, _ = execute(g, d, {"x": x}, [{"x": x}])
    assert out["out0"].tolist() == torch.tensor(x).to(torch.int64).tolist() == [-1, 0, 0, 1, 2, 1]
    assert out["out1"].tolist() == torch.tensor(x).to(torch.bfloat16).double().tolist()
    assert out["out1"][-1] == 1.0


def test_uninitialized_buffers_are_nan_unless_ignored():
    g, d = _one(_fx('a: "f32[2, 3, 4]", b: "f32[2, 4, 5]"', '''
e: "f32[2, 3, 5]" = torch.ops.aten.empty.memory_format([2, 3, 5], dtype=torch.float32)
ignored: "f32[2, 3, 5]" = torch.ops.aten.baddbmm.default(e, a, b, beta=0)
read: "f32[2, 3, 5]" = torch.ops.aten.baddbmm.default(e, a, b)
return (ignored, read)'''))
    ins = draw_inputs(g, 0)
    out, _ = execute(g, d, ins, [ins])
    assert np.allclose(out["out0"], ins["a"] @ ins["b"]) and np.isnan(out["out1"]).all()


def test_random_ops_unknown_ops_and_missing_constants_are_not_executable():
    drop = _fx('x: "f32[4]"', '''
nd = torch.ops.aten.native_dropout.default(x, P, True)
y: "f32[4]" = nd[0]
return (y,)''')
    g, d = _one(drop.replace("P", "0.0"))
    x = np.arange(4.0)
    assert np.array_equal(execute(g, d, {"x": x}, [{"x": x}])[0]["out0"], x)
    g, d = _one(drop.replace("P", "0.1"))
    with pytest.raises(NotExecutable) as exc:
        execute(g, d, {"x": x}, [{"x": x}])
    assert (exc.value.op, exc.value.node) == ("aten.native_dropout", "nd")
    g, d = _one(_fx('x: "f32[4]"', '''
y: "f32[4]" = torch.ops.mylib.mystery.default(x)
return (y,)'''))
    with pytest.raises(NotExecutable) as exc:
        execute(g, d, {"x": x}, [{"x": x}])
    assert exc.value.op == "mylib.mystery"
    g, d = _one(_fx('x: "f32[4]"', '''
y: "f32[5]" = torch.ops.aten.neg.default(x)
return (y,)'''))
    with pytest.raises(NotExecutable) as exc:  # the dump's annotation disagrees with torch
        execute(g, d, {"x": x}, [{"x": x}])
    assert exc.value.node == "y" and "torch gives shape [4], the graph says [5]" in str(exc.value)
    g, d = _one(_fx('x: "f32[4]"', '''
_tensor_constant0 = self._tensor_constant0
c: "f32[4]" = torch.ops.aten.lift_fresh_copy.default(_tensor_constant0)
y: "f32[4]" = torch.ops.aten.add.Tensor(x, c)
return (y,)'''))
    with pytest.raises(NotExecutable) as exc:
        execute(g, d, {"x": x}, [{"x": x}])
    assert (exc.value.op, exc.value.node) == ("constant", "_tensor_constant0")


def test_integer_inputs_are_drawn_below_the_rows_they_index():
    g, _ = _one(_fx('ids: "i64[64]", table: "f32[5, 3]", pos: "i64[64]"', '''
v: "i64[8, 8]" = torch.ops.aten.view.default(ids, [8, 8])
e: "f32[8, 8, 3]" = torch.ops.aten.embedding.default(table, v)
return (e, pos)'''))
    ins = draw_inputs(g, 3)
    assert ins["ids"].min() >= 0 and ins["ids"].max() == 4 and set(ins["pos"].tolist()) == {0, 1}
    assert ins["table"].dtype == np.float64 and abs(ins["table"].mean()) < 2


def test_values_are_freed_after_their_last_use(monkeypatch):
    # a chain of 40 adds of a 1 MiB value: the peak is a few values, not 40
    body = "\n".join(f'y{i + 1}: "f32[256, 512]" = torch.ops.aten.add.Tensor(y{i}, x)' for i in range(40))
    g, d = _one(_fx('x: "f32[256, 512]"', 'y0: "f32[256, 512]" = torch.ops.aten.neg.default(x)\n' + body
                    + "\nreturn (y40,)"))
    peak, name, size = estimate_bytes(g, d)
    assert size == 256 * 512 * 8 and peak <= 4 * size
    import weakref
    from shardproof.frontends import torch_exec
    made, most = [], [0]
    kernel = torch_exec._aten

    def add(*a, **k):  # counts the adds' results still alive when the next add runs
        most[0] = max(most[0], sum(r() is not None for r in made))
        out = torch.ops.aten.add(*a, **k)
        made.append(weakref.ref(out))
        return out
    monkeypatch.setattr(torch_exec, "_aten", lambda op: add if op == "aten.add" else kernel(op))
    out, _ = execute(g, d, {"x": np.ones((256, 512))}, [{"x": np.ones((256, 512))}])
    assert len(made) == 80 and most[0] <= 2
    assert out["out0"][0, 0] == 39


# ---------------------------------------------------------------- the real dumps: sizes


@pytest.mark.parametrize("name, seq, dist, largest, elements", [
    ("gpt", "paral1_layer1", "paral2_layer1", ("mm_4", "view_30"), 1_207_959_552),
    ("qwen2", "paral1_layer1", "paral2_layer1", ("mm_1",), 587_202_560),
    ("aws_llama", "tp1_layer1", "tp2_layer1", ("p16.17",), 262_668_288),
])
def test_real_dumps_are_sized_before_anything_is_allocated(name, seq, dist, largest, elements):
    relations = os.path.join(ROOT, "examples", "dumps",
                             {"gpt": "megatron_gpt", "qwen2": "qwen2", "aws_llama": "aws_llama"}[name] + ".yaml")
    p = prepare_dumps(shared(name, seq), shared(name, dist), relations, auto_relations=True)
    peak, big, size = estimate_bytes(p.seq, p.dist)
    assert big in largest and size == elements * 8 and peak >= 2 * size


def test_views_of_values_laid_out_otherwise_are_their_values():
    # clone(memory_format=contiguous) loses its format in the dump: the view still reads the values
    g, d = _one(_fx('x: "f32[2, 3, 4]"', '''
p: "f32[3, 2, 4]" = torch.ops.aten.permute.default(x, [1, 0, 2])
c: "f32[3, 2, 4]" = torch.ops.aten.clone.default(p, memory_format = torch.contiguous_format)
v: "f32[3, 8]" = torch.ops.aten.view.default(c, [3, 8])
return (v,)'''))
    x = np.arange(24.0).reshape(2, 3, 4)
    assert np.array_equal(execute(g, d, {"x": x}, [{"x": x}])[0]["out0"], x.transpose(1, 0, 2).reshape(3, 8))


ELIDED = """HloModule m

ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %c = f32[4,8]{1,0} constant({...})
  ROOT %y = f32[4,8]{1,0} add(%x, %c)
}
"""


def test_elided_constants_stated_same_read_one_value(tmp_path):
    (tmp_path / "m.hlo").write_text(ELIDED)
    rel = tmp_path / "rel.yaml"
    rel.write_text("inputs:\n  x: Replicate()\nconstants:\n  c: same\n")
    m = str(tmp_path / "m.hlo")
    p = prepare_dumps(m, m, str(rel), world_size=2)
    s_in, d_in = draw_program_inputs(p.seq, p.dist, p.bindings, 0)
    s_out, d_out = execute(p.seq, p.dist, s_in, d_in)
    c = s_out["out0"] - s_in["x"]
    assert np.abs(c).max() > 0 and all(np.array_equal(d["out0"], s_out["out0"]) for d in d_out)
    rel.write_text("inputs:\n  x: Replicate()\n")
    p = prepare_dumps(m, m, str(rel), world_size=2)
    with pytest.raises(NotExecutable) as exc:
        execute(p.seq, p.dist, s_in, d_in)
    assert (exc.value.op, exc.value.node) == ("constant", "c")


# ---------------------------------------------------------------- collectives, against a real gloo group

GROUPS = {"w": (0, 1, 2), "s": (1, 2)}  # the world, and a subgroup without rank 0


def collectives_program(rank, world, inputs):
    """The ops of :func:`_collectives_dump`, run for real (funcol kernels on gloo)."""
    import torch.distributed as dist
    c = torch.ops._c10d_functional
    w = dist.group.WORLD.group_name
    s = dist.new_group([1, 2])
    x = inputs["x"]
    out = {"ar": c.wait_tensor(c.all_reduce(x, "sum", w)),
           "ag": c.wait_tensor(c.all_gather_into_tensor(x, world, w)),
           "rs": c.wait_tensor(c.reduce_scatter_tensor(x, "sum", world, w)),
           "a2a": c.wait_tensor(c.all_to_all_single(x, [2] * world, [2] * world, w)),
           "mx": c.wait_tensor(c.all_reduce(x, "max", w))}
    if rank in (1, 2):
        out["bc"] = c.wait_tensor(c.broadcast(x, 1, s.group_name))
    return out


def _collectives_dump(rank: int) -> str:
    body = '''
ar0: "f64[6, 4]" = torch.ops._c10d_functional.all_reduce.default(x, 'sum', 'w')
ar: "f64[6, 4]" = torch.ops._c10d_functional.wait_tensor.default(ar0)
ag0: "f64[18, 4]" = torch.ops._c10d_functional.all_gather_into_tensor.default(x, 3, 'w')
ag: "f64[18, 4]" = torch.ops._c10d_functional.wait_tensor.default(ag0)
rs0: "f64[2, 4]" = torch.ops._c10d_functional.reduce_scatter_tensor.default(x, 'sum', 3, 'w')
rs: "f64[2, 4]" = torch.ops._c10d_functional.wait_tensor.default(rs0)
a2a0: "f64[6, 4]" = torch.ops._c10d_functional.all_to_all_single.default(x, [2, 2, 2], [2, 2, 2], 'w')
a2a: "f64[6, 4]" = torch.ops._c10d_functional.wait_tensor.default(a2a0)
mx0: "f64[6, 4]" = torch.ops._c10d_functional.all_reduce.default(x, 'max', 'w')
mx: "f64[6, 4]" = torch.ops._c10d_functional.wait_tensor.default(mx0)'''
    if rank:
        body += '''
bc0: "f64[6, 4]" = torch.ops._c10d_functional.broadcast.default(x, 1, 's')
bc: "f64[6, 4]" = torch.ops._c10d_functional.wait_tensor.default(bc0)
return (ar, ag, rs, a2a, mx, bc)'''
    else:
        body += "\nreturn (ar, ag, rs, a2a, mx)"
    return _fx('x: "f64[6, 4]"', body)


@pytest.fixture(scope="module")
def collectives_on_gloo():
    from gloo import run_program_on_gloo
    rng = np.random.default_rng(7)
    rank_inputs = [{"x": rng.standard_normal((6, 4))} for _ in range(3)]
    names = ["ar", "ag", "rs", "a2a", "mx"]
    graphs = []
    for r in range(3):
        g = parse_graph(_collectives_dump(r), f"r{r}.py", groups=GROUPS, world_size=3, rank=r)
        g.outputs = {n: g.outputs[f"out{i}"] for i, n in enumerate(names + (["bc"] if r else []))}
        graphs.append(g)
    seq = parse_graph(_fx('x: "f64[6, 4]"', 'y: "f64[6, 4]" = torch.ops.aten.clone.default(x)\nreturn (y,)'),
                      "seq.py")
    real = run_program_on_gloo("test_torch_exec", "collectives_program", rank_inputs)
    return seq, DistributedProgram(graphs), rank_inputs, real


@pytest.mark.slow  # three processes on a gloo group
def test_collectives_compute_what_gloo_computes(collectives_on_gloo):
    seq, dist, rank_inputs, real = collectives_on_gloo
    _, executed = execute(seq, dist, {"x": rank_inputs[0]["x"]}, rank_inputs)
    for r in range(3):
        assert sorted(executed[r]) == sorted(real[r])
        for name in real[r]:
            assert np.allclose(executed[r][name], real[r][name], rtol=1e-12, atol=1e-12), (r, name)
    # the subgroup's broadcast takes src as the rank *in the group*: group rank 1 is global rank 2
    assert np.array_equal(real[1]["bc"], rank_inputs[2]["x"])


@pytest.mark.slow
def test_numpy_numerics_compute_what_gloo_computes(collectives_on_gloo):
    seq, dist, rank_inputs, real = collectives_on_gloo
    _, envs = evaluate(seq, dist, {"x": rank_inputs[0]["x"]}, rank_inputs)
    for r, g in enumerate(dist.graphs):
        for name, node in g.outputs.items():
            assert np.allclose(np.asarray(envs[r][node], dtype=np.float64), real[r][name]), (r, name)


# ---------------------------------------------------------------- XLA ops and collectives (replica groups)

XLA_OPS = """HloModule colls

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(%a, %b)
}

ENTRY %main (x: f32[4,6], i: s32[]) -> (f32[8,6], f32[4,3], f32[4,6], f32[4,6], f32[4,6], f32[7,7], f32[2,3], f32[4,6], f32[4,6], s32[4,6]) {
  %x = f32[4,6]{1,0} parameter(0)
  %i = s32[] parameter(1)
  %ag = f32[8,6]{1,0} all-gather(%x), replica_groups={{0,1},{2,3}}, dimensions={0}
  %rs = f32[4,3]{1,0} reduce-scatter(%x), replica_groups={{0,1},{2,3}}, dimensions={1}, to_apply=%sum
  %a2a = f32[4,6]{1,0} all-to-all(%x), replica_groups={{0,1,2,3}}, dimensions={0}
  %cp = f32[4,6]{1,0} collective-permute(%x), source_target_pairs={{0,1},{1,2},{2,3}}
  %ar = f32[4,6]{1,0} all-reduce(%x), replica_groups={{0,2},{1,3}}, to_apply=%sum
  %zero = f32[] constant(0.5)
  %pd = f32[7,7]{1,0} pad(%x, %zero), padding=1_2x-1_2
  %ds = f32[2,3]{1,0} dynamic-slice(%x, %i, %i), dynamic_slice_sizes={2,3}
  %up = f32[2,3]{1,0} constant({ {1, 2, 3}, {4, 5, 6} })
  %dus = f32[4,6]{1,0} dynamic-update-slice(%x, %up, %i, %i)
  %io = s32[4,6]{1,0} iota(), iota_dimension=1
  %iof = f32[4,6]{1,0} convert(%io)
  %cmp = pred[4,6]{1,0} compare(%x, %iof), direction=LT
  %sel = f32[4,6]{1,0} select(%cmp, %x, %iof)
  %cv = s32[4,6]{1,0} convert(%x)
  ROOT %t = (f32[8,6], f32[4,3], f32[4,6], f32[4,6], f32[4,6], f32[7,7], f32[2,3], f32[4,6], f32[4,6], s32[4,6]) tuple(%ag, %rs, %a2a, %cp, %ar, %pd, %ds, %dus, %sel, %cv)
}
"""


def test_xla_ops_and_collectives_follow_xla_semantics():
    from shardproof.frontends.hlo_text import load_hlo_program
    graphs = load_hlo_program(XLA_OPS, 4, filename="ops.hlo")
    dist = DistributedProgram(graphs)
    seq = parse_graph(_fx('x: "f32[4, 6]"', 'y: "f32[4, 6]" = torch.ops.aten.clone.default(x)\nreturn (y,)'), "s.py")
    rng = np.random.default_rng(0)
    ins = [{"x": rng.standard_normal((4, 6)) * 3, "i": np.array(r, dtype=np.int32)} for r in range(4)]
    x = [i["x"] for i in ins]
    _, out = execute(seq, dist, {"x": x[0]}, ins)
    names = ["ag", "rs", "a2a", "cp", "ar", "pd", "ds", "dus", "sel", "cv"]
    got = [{n: o[f"out{k}"] for k, n in enumerate(names)} for o in out]
    for r in range(4):
        g = got[r]
        pair = [0, 1] if r < 2 else [2, 3]
        assert np.allclose(g["ag"], np.concatenate([x[p] for p in pair]))
        assert np.allclose(g["rs"], (x[pair[0]] + x[pair[1]])[:, 3 * pair.index(r):3 * pair.index(r) + 3])
        assert np.allclose(g["a2a"], np.concatenate([x[p][r:r + 1] for p in range(4)]))
        assert np.allclose(g["cp"], x[r - 1] if r else 0)  # pairs 0->1->2->3: rank 0 receives nothing
        assert np.allclose(g["ar"], x[r % 2] + x[r % 2 + 2])
        pad = np.full((7, 7), 0.5)
        pad[1:5, 0:5] = x[r][:, 1:]
        assert np.allclose(g["pd"], pad)
        lo = [min(r, 2), min(r, 3)]  # starts clamped so that the window fits
        assert np.allclose(g["ds"], x[r][lo[0]:lo[0] + 2, lo[1]:lo[1] + 3])
        dus = x[r].copy()
        dus[lo[0]:lo[0] + 2, lo[1]:lo[1] + 3] = [[1, 2, 3], [4, 5, 6]]
        assert np.allclose(g["dus"], dus)
        cols = np.broadcast_to(np.arange(6.0), (4, 6))
        assert np.allclose(g["sel"], np.where(x[r] < cols, x[r], cols))
        assert g["cv"].dtype == np.int32 and np.array_equal(g["cv"], np.trunc(x[r]))  # toward zero
    # the numpy numerics agree on every op
    _, envs = evaluate(seq, dist, {"x": x[0]}, ins)
    for r, graph in enumerate(graphs):
        for name, node in graph.outputs.items():
            assert np.allclose(np.asarray(envs[r][node], dtype=np.float64), out[r][name]), (r, name)


def test_interior_padding():
    from shardproof.frontends.hlo_text import load_hlo_program
    text = """HloModule p

ENTRY %main (x: f32[2,3]) -> f32[3,8] {
  %x = f32[2,3]{1,0} parameter(0)
  %v = f32[] constant(-1)
  ROOT %p = f32[3,8]{1,0} pad(%x, %v), padding=0_0_1x1_0_2
}
"""
    (g,) = load_hlo_program(text, 1, filename="p.hlo")
    x = np.arange(6.0).reshape(2, 3)
    out = execute(g, DistributedProgram([g]), {"x": x}, [{"x": x}])[0]["out0"]
    want = np.full((3, 8), -1.0)
    want[0::2, 1::3] = x  # a row between the rows, two columns between the columns, one column before
    assert np.array_equal(out, want)


def test_integer_divide_and_remainder_follow_xla():
    # XLA: integer divide rounds toward zero, remainder keeps the dividend's sign (both types)
    from shardproof.frontends.hlo_text import load_hlo_program
    text = """HloModule r

ENTRY %main (a: s32[4], b: s32[4], x: f32[4], y: f32[4]) -> (s32[4], s32[4], f32[4]) {
  %a = s32[4]{0} parameter(0)
  %b = s32[4]{0} parameter(1)
  %x = f32[4]{0} parameter(2)
  %y = f32[4]{0} parameter(3)
  %d = s32[4]{0} divide(%a, %b)
  %n = s32[4]{0} and(%a, %b)
  %r = s32[4]{0} remainder(%a, %b)
  %fr = f32[4]{0} remainder(%x, %y)
  ROOT %t = (s32[4], s32[4], f32[4]) tuple(%d, %r, %fr)
}
"""
    (g,) = load_hlo_program(text, 1, filename="r.hlo")
    assert g.node("n").op == "aten.bitwise_and"  # on integers XLA's and is bit by bit
    ins = {"a": np.array([7, -7, 7, -7], dtype=np.int32), "b": np.array([2, 2, -2, -2], dtype=np.int32),
           "x": np.array([5.5, -5.5, 5.5, -5.5]), "y": np.array([2.0, 2.0, -2.0, -2.0])}
    d = DistributedProgram([g])
    out = execute(g, d, ins, [ins])[0]
    env = evaluate(g, d, ins, [ins])[0]
    want = {"out0": [3, -3, -3, 3], "out1": [1, -1, 1, -1], "out2": [1.5, -1.5, 1.5, -1.5]}
    for name, node in g.outputs.items():
        assert out[name].tolist() == want[name] and np.asarray(env[node]).tolist() == want[name], name


def test_integer_bitwise_ops_agree_with_the_numpy_numerics():
    g, d = _one(_fx('a: "i64[4]", b: "i64[4]"', '''
x: "i64[4]" = torch.ops.aten.bitwise_and.Tensor(a, b)
y: "i64[4]" = torch.ops.aten.bitwise_or.Tensor(a, b)
return (x, y)'''))
    ins = {"a": np.array([6, 5, 12, 0]), "b": np.array([3, 3, 10, 7])}
    out = execute(g, d, ins, [ins])[0]
    assert out["out0"].tolist() == [2, 1, 8, 0] and out["out1"].tolist() == [7, 7, 14, 7]  # torch's own values
    env = evaluate(g, d, ins, [ins])[0]
    assert [np.asarray(env[n]).astype(np.int64).tolist() for n in g.outputs.values()] == [[2, 1, 8, 0], [7, 7, 14, 7]]


def test_programs_writing_into_their_inputs_leave_the_callers_values_alone():
    g, d = _one(_fx('x: "f32[3]"', '''
a: "f32[3]" = torch.ops.aten.add_.Tensor(x, 1)
return (a,)'''))
    x = np.zeros(3)
    s_out, d_out = execute(g, d, {"x": x}, [{"x": x}])  # the same array on both sides, as Replicate gives
    assert x.tolist() == [0, 0, 0] and s_out["out0"].tolist() == d_out[0]["out0"].tolist() == [1, 1, 1]
