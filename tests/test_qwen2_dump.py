"""vLLM Qwen2 decoder layers from graph dumps: the real Entangle dump pair (one layer, TP 2)
is proved with the relations in ``examples/dumps/qwen2.yaml``, and a wrong relation is
never verified. Small dumps of the same op sequence, written here at any size, layer
count and TP degree (KV heads replicated when TP exceeds them), are proved too, agree
numerically, and injected bugs in them are violations."""
import os

import numpy as np
import pytest
import yaml

from shardproof.engine.verify import differing_outputs, verify_graphs
from shardproof.frontends.fx_program import load_program
from shardproof.frontends.fx_text import parse_graph
from shardproof.ir.graph import DistributedProgram
from shardproof.relations.infer import parse_spec, resolve_inputs
from shardproof.relations.spec import parse_relation

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPHS = os.path.join(ROOT, "..", "shared", "graphs", "entangle", "qwen2")
RELATIONS = os.path.join(ROOT, "examples", "dumps", "qwen2.yaml")


def _verify(seq, graphs, spec, outputs, examples=None):
    dist = DistributedProgram(graphs)
    bindings = resolve_inputs({n.name: n.shape for n in seq.inputs},
                              [{n.name: n.shape for n in g.inputs} for g in dist.graphs], spec, by_shape=False)
    expect = {k: parse_relation(outputs[n.name]) for k, n in seq.outputs.items() if n.name in outputs}
    return verify_graphs(seq, dist, bindings, expect, examples=examples, name="qwen2"), (seq, dist, bindings, expect)


# ---------------------------------------------------------------- the real dumps

def _relations(spec_edit=None):
    """The relations file's inputs (with `spec_edit` applied) and expected outputs."""
    with open(RELATIONS) as f:
        data = yaml.safe_load(f)
    return parse_spec({**data["inputs"], **(spec_edit or {})}), data["expect"]


def _real(spec_edit=None, rank_texts=None):
    if not os.path.isdir(GRAPHS):
        pytest.skip(f"../shared/graphs absent: {os.path.normpath(GRAPHS)} not found")
    seq = load_program(os.path.join(GRAPHS, "paral1_layer1"), kind="fw")[0]
    if rank_texts is None:
        ranks = load_program(os.path.join(GRAPHS, "paral2_layer1"), kind="fw")
    else:
        ranks = [parse_graph(t, f"r{r}.py", world_size=len(rank_texts), rank=r) for r, t in enumerate(rank_texts)]
    spec, expect = _relations(spec_edit)
    return _verify(seq, ranks, spec, expect)[0]


def test_real_qwen2_layer_tp2_is_verified():
    report = _real()
    assert report.status == "verified", report.reason
    assert report.strength == "proof"
    out = next(o for o in report.outputs if o.name == "out0")  # getitem_34, the final hidden states
    assert out.holds == "Replicate()"


def test_real_qwen2_with_plain_shard_for_fused_qkv_is_not_verified():
    # shapes fit Shard(0) too, but rank 1 would hold q heads 6..11 + k heads... of the wrong sections
    report = _real({"arg3_1": "Shard(0)", "arg4_1": "Shard(0)"})
    assert report.status != "verified"


def test_real_qwen2_with_a_shifted_vocab_range_on_one_rank_is_not_verified():
    if not os.path.isdir(GRAPHS):
        pytest.skip(f"../shared/graphs absent: {os.path.normpath(GRAPHS)} not found")
    d = os.path.join(GRAPHS, "paral2_layer1")
    texts = [open(os.path.join(d, f)).read() for f in sorted(os.listdir(d)) if f.startswith("fw.")]
    ge = "torch.ops.aten.ge.Scalar(arg0_1, "
    at = texts[1].index(ge) + len(ge)
    end = texts[1].index(")", at)
    texts[1] = texts[1][:at] + str(int(texts[1][at:end]) - 1) + texts[1][end:]  # rank 1 also takes token lo - 1
    assert _real(rank_texts=texts).status != "verified"


def test_real_qwen2_with_plain_shard_for_gate_up_is_not_verified():
    report = _real({"arg9_1": "Shard(0)"})
    assert report.status != "verified"


# ---------------------------------------------------------------- small dumps of the same program

class Config:
    def __init__(self, tokens=6, hidden=16, heads=4, kv_heads=2, head_dim=4, ffn=12, vocab=24, max_pos=8, layers=1):
        self.__dict__.update(tokens=tokens, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                             ffn=ffn, vocab=vocab, max_pos=max_pos, layers=layers)


def qwen2_dump(c: Config, world: int, rank: int, bug: str = "") -> str:
    """One rank's forward graph as vLLM's Qwen2 prints it (``world`` 1: the single-device
    graph); the op sequence of the Entangle dumps, at any size. ``bug`` injects one error."""
    T, h, d = c.tokens, c.hidden, c.head_dim
    hq, hkv = c.heads // world, max(c.kv_heads // world, 1)
    q, kv, f, v = hq * d, hkv * d, c.ffn // world, c.vocab // world
    params = [("ids", f"i64[{T}]"), ("embed", f"f32[{v}, {h}]"), ("positions", f"i64[{T}]"),
              ("cos_sin", f"f32[{c.max_pos}, {d}]"), ("final_norm", f"f32[{h}]")]
    for i in range(c.layers):
        params += [(f"ln1_{i}", f"f32[{h}]"), (f"qkv_b{i}", f"f32[{q + 2 * kv}]"), (f"qkv_w{i}", f"f32[{q + 2 * kv}, {h}]"),
                   (f"o_w{i}", f"f32[{h}, {q}]"), (f"ln2_{i}", f"f32[{h}]"), (f"gate_up{i}", f"f32[{2 * f}, {h}]"),
                   (f"down{i}", f"f32[{h}, {f}]")]
    lines = []

    def op(name, ty, call):
        lines.append(f'{name}: "{ty}" = {call}' if ty else f"{name} = {call}")

    def all_reduce(name, x):
        if world > 1:
            op(name, f"f32[{T}, {h}]", f"torch.ops.vllm.all_reduce.default({x}, 'tp:0')")
            return name
        return x

    if world > 1:
        lo, hi = rank * v, (rank + 1) * v
        if bug == "vocab_range" and rank == 1:
            lo, hi = lo - 1, hi - 1
        op("ge", f"b8[{T}]", f"torch.ops.aten.ge.Scalar(ids, {lo})")
        op("lt", f"b8[{T}]", f"torch.ops.aten.lt.Scalar(ids, {hi})")
        op("bitwise_and", f"b8[{T}]", "torch.ops.aten.bitwise_and.Tensor(ge, lt)")
        op("ge_1", f"b8[{T}]", f"torch.ops.aten.ge.Scalar(ids, {c.vocab})")
        op("lt_1", f"b8[{T}]", f"torch.ops.aten.lt.Scalar(ids, {c.vocab})")
        op("bitwise_and_1", f"b8[{T}]", "torch.ops.aten.bitwise_and.Tensor(ge_1, lt_1)")
        op("mul", f"i64[{T}]", f"torch.ops.aten.mul.Tensor(bitwise_and, {lo})")
        op("mul_1", f"i64[{T}]", f"torch.ops.aten.mul.Tensor(bitwise_and_1, {c.vocab - v})")
        op("add", f"i64[{T}]", "torch.ops.aten.add.Tensor(mul, mul_1)")
        op("bitwise_or", f"b8[{T}]", "torch.ops.aten.bitwise_or.Tensor(bitwise_and, bitwise_and_1)")
        op("sub", f"i64[{T}]", "torch.ops.aten.sub.Tensor(ids, add)")
        op("mul_2", f"i64[{T}]", "torch.ops.aten.mul.Tensor(bitwise_or, sub)")
        op("bitwise_not", f"b8[{T}]", "torch.ops.aten.bitwise_not.default(bitwise_or)")
        op("embedding", f"f32[{T}, {h}]", "torch.ops.aten.embedding.default(embed, mul_2)")
        op("unsqueeze", f"b8[{T}, 1]", "torch.ops.aten.unsqueeze.default(bitwise_not, -1)")
        op("masked_fill", f"f32[{T}, {h}]", "torch.ops.aten.masked_fill.Scalar(embedding, unsqueeze, 0)")
        hidden = all_reduce("emb_reduced", "masked_fill")
    else:
        op("embedding", f"f32[{T}, {h}]", "torch.ops.aten.embedding.default(embed, ids)")
        hidden = "embedding"
    residual = None
    for i in range(c.layers):
        if residual is None:
            op(f"empty_like_{i}", f"f32[{T}, {h}]", f"torch.ops.aten.empty_like.default({hidden}, pin_memory = False)")
            op(f"ln1_af{i}", None, f"torch.ops.higher_order.auto_functionalized(torch.ops._C.rms_norm.default, "
                                   f"result = empty_like_{i}, input = {hidden}, weight = ln1_{i}, epsilon = 1e-06)")
            op(f"normed{i}", f"f32[{T}, {h}]", f"ln1_af{i}[1]")
            residual = hidden
        else:
            op(f"ln1_af{i}", None, f"torch.ops.higher_order.auto_functionalized(torch.ops._C.fused_add_rms_norm.default, "
                                   f"input = {hidden}, residual = {residual}, weight = ln1_{i}, epsilon = 1e-06)")
            op(f"normed{i}", f"f32[{T}, {h}]", f"ln1_af{i}[1]")
            op(f"resid_a{i}", f"f32[{T}, {h}]", f"ln1_af{i}[2]")
            residual = f"resid_a{i}"
        n = q + 2 * kv
        op(f"t{i}", f"f32[{h}, {n}]", f"torch.ops.aten.t.default(qkv_w{i})")
        op(f"addmm{i}", f"f32[{T}, {n}]", f"torch.ops.aten.addmm.default(qkv_b{i}, normed{i}, t{i})")
        op(f"split{i}", None, f"torch.ops.aten.split_with_sizes.default(addmm{i}, [{q}, {kv}, {kv}], -1)")
        op(f"q{i}", f"f32[{T}, {q}]", f"split{i}[0]")
        op(f"k{i}", f"f32[{T}, {kv}]", f"split{i}[1]")
        op(f"rope{i}", None, f"torch.ops.higher_order.auto_functionalized(torch.ops._C.rotary_embedding.default, "
                             f"positions = positions, query = q{i}, key = k{i}, head_size = {d}, "
                             f"cos_sin_cache = cos_sin, is_neox = True)")
        op(f"q_rot{i}", f"f32[{T}, {q}]", f"rope{i}[1]")
        op(f"k_rot{i}", f"f32[{T}, {kv}]", f"rope{i}[2]")
        op(f"ss{i}", f"f32[{T}, {n}]", f"torch.ops.aten.slice_scatter.default(addmm{i}, q_rot{i}, 1, 0, {q})")
        op(f"ss1_{i}", f"f32[{T}, {n}]", f"torch.ops.aten.slice_scatter.default(ss{i}, k_rot{i}, 1, {q}, {q + kv})")
        op(f"split_b{i}", None, f"torch.ops.aten.split_with_sizes.default(ss1_{i}, [{q}, {kv}, {kv}], -1)")
        op(f"q2_{i}", f"f32[{T}, {q}]", f"split_b{i}[0]")
        op(f"k2_{i}", f"f32[{T}, {kv}]", f"split_b{i}[1]" if not (bug == "key_reads_query" and rank == 1) else
           f"torch.ops.aten.slice.Tensor(ss1_{i}, 1, 0, {kv})")
        op(f"v2_{i}", f"f32[{T}, {kv}]", f"split_b{i}[2]")
        op(f"out_buf{i}", f"f32[{T}, {q}]", f"torch.ops.aten.empty_like.default(q2_{i}, pin_memory = False)")
        op(f"out_view{i}", f"f32[{T}, {hq}, {d}]", f"torch.ops.aten.view.default(out_buf{i}, [-1, {hq}, {d}])")
        op(f"qv{i}", f"f32[{T}, {hq}, {d}]", f"torch.ops.aten.view.default(q2_{i}, [-1, {hq}, {d}])")
        op(f"kv{i}", f"f32[{T}, {hkv}, {d}]", f"torch.ops.aten.view.default(k2_{i}, [-1, {hkv}, {d}])")
        op(f"vv{i}", f"f32[{T}, {hkv}, {d}]", f"torch.ops.aten.view.default(v2_{i}, [-1, {hkv}, {d}])")
        op(f"attn{i}", None, f"torch.ops.higher_order.auto_functionalized(torch.ops.vllm.unified_attention_with_output"
                             f".default, query = qv{i}, key = kv{i}, value = vv{i}, output = out_view{i}, "
                             f"layer_name = 'model.layers.{i}.self_attn.attn')")
        op(f"attn_out{i}", f"f32[{T}, {hq}, {d}]", f"attn{i}[1]")
        op(f"flat{i}", f"f32[{T}, {q}]", f"torch.ops.aten.view.default(attn_out{i}, [{T}, {q}])")
        op(f"t_o{i}", f"f32[{q}, {h}]", f"torch.ops.aten.t.default(o_w{i})")
        op(f"mm_o{i}", f"f32[{T}, {h}]", f"torch.ops.aten.mm.default(flat{i}, t_o{i})")
        hidden = all_reduce(f"ar_o{i}", f"mm_o{i}") if bug != "missing_all_reduce" else f"mm_o{i}"
        op(f"ln2_af{i}", None, f"torch.ops.higher_order.auto_functionalized(torch.ops._C.fused_add_rms_norm.default, "
                               f"input = {hidden}, residual = {residual}, weight = ln2_{i}, epsilon = 1e-06)")
        op(f"normed2_{i}", f"f32[{T}, {h}]", f"ln2_af{i}[1]")
        op(f"resid_b{i}", f"f32[{T}, {h}]", f"ln2_af{i}[2]")
        residual = f"resid_b{i}"
        op(f"t_gu{i}", f"f32[{h}, {2 * f}]", f"torch.ops.aten.t.default(gate_up{i})")
        op(f"mm_gu{i}", f"f32[{T}, {2 * f}]", f"torch.ops.aten.mm.default(normed2_{i}, t_gu{i})")
        op(f"act_buf{i}", f"f32[{T}, {f}]", f"torch.ops.aten.empty.memory_format([{T}, {f}], dtype = torch.float32, "
                                           f"device = device(type='cuda', index={rank}), pin_memory = False)")
        op(f"act_af{i}", None, f"torch.ops.higher_order.auto_functionalized(torch.ops._C.silu_and_mul.default, "
                               f"out = act_buf{i}, input = mm_gu{i})")
        op(f"act{i}", f"f32[{T}, {f}]", f"act_af{i}[1]")
        op(f"t_d{i}", f"f32[{f}, {h}]", f"torch.ops.aten.t.default(down{i})")
        op(f"mm_d{i}", f"f32[{T}, {h}]", f"torch.ops.aten.mm.default(act{i}, t_d{i})")
        hidden = all_reduce(f"ar_d{i}", f"mm_d{i}")
    op("final_af", None, f"torch.ops.higher_order.auto_functionalized(torch.ops._C.fused_add_rms_norm.default, "
                         f"input = {hidden}, residual = {residual}, weight = final_norm, epsilon = 1e-06)")
    op("final", f"f32[{T}, {h}]", "final_af[1]")
    lines.append("return (final,)")
    sig = ", ".join(f'{name}: "{ty}"' for name, ty in params)
    return (f"class GraphModule(torch.nn.Module):\n    def forward(self, {sig}):\n"
            + "".join(f"        {ln}\n" for ln in lines))


def qwen2_relations(c: Config, world: int) -> dict:
    qkv = f"Interleaved(0, [{c.heads * c.head_dim}, {c.kv_heads * c.head_dim}, {c.kv_heads * c.head_dim}]" + (
        f", blocks=[{world}, {c.kv_heads}, {c.kv_heads}])" if world > c.kv_heads else ")")
    spec = {"ids": "Replicate()", "positions": "Replicate()", "cos_sin": "Replicate()", "final_norm": "Replicate()",
            "embed": "Shard(0)", "ln*": "Replicate()", "qkv_*": qkv, "o_w*": "Shard(1)", "down*": "Shard(1)",
            "gate_up*": f"Interleaved(0, [{c.ffn}, {c.ffn}])"}
    return spec


def verify_small(c: Config, world: int, bug: str = "", spec_edit=None):
    seq = parse_graph(qwen2_dump(c, 1, 0), "seq.py", world_size=1)
    ranks = [parse_graph(qwen2_dump(c, world, r, bug), f"r{r}.py", world_size=world) for r in range(world)]
    spec = qwen2_relations(c, world)
    spec.update(spec_edit or {})
    examples = {"ids": np.arange(c.tokens) * 5 % c.vocab, "positions": np.arange(c.tokens) % c.max_pos}
    return _verify(seq, ranks, parse_spec(spec), {"final": "Replicate()"}, examples)


@pytest.mark.parametrize("world,layers", [(2, 1), (2, 2), (4, 1)])
def test_small_qwen2_dump_is_verified_and_agrees_numerically(world, layers):
    c = Config(layers=layers)
    report, (seq, dist, bindings, expect) = verify_small(c, world)
    assert report.status == "verified", report.reason
    assert report.outputs[0].holds == "Replicate()"
    for seed in (0, 1):
        assert differing_outputs(seq, dist, bindings, expect, {"ids": np.arange(c.tokens) * 5 % c.vocab},
                                 seed=seed)[0] == []


@pytest.mark.parametrize("world,heads", [(6, 12), (8, 8)])
def test_small_qwen2_dump_with_kv_heads_replicated_to_ranks(world, heads):
    # 2 KV heads over 6 or 8 ranks: each KV head serves 3 or 4 ranks (2 or 1 query heads each)
    c = Config(heads=heads, kv_heads=2, hidden=2 * heads, ffn=2 * world, vocab=4 * world)
    report, (seq, dist, bindings, expect) = verify_small(c, world)
    assert report.status == "verified", report.reason
    assert differing_outputs(seq, dist, bindings, expect, {"ids": np.arange(c.tokens) * 5 % c.vocab})[0] == []


def test_small_qwen2_dump_multi_query():
    report, _ = verify_small(Config(heads=4, kv_heads=1), 2)
    assert report.status == "verified", report.reason


@pytest.mark.parametrize("bug,node,op,ranks,kind", [
    ("key_reads_query", "attn0", "vllm.unified_attention_with_output", [1], "wrong-shard-offset"),
    # rank 1's vocabulary mask is off by one: the masks are rank-local values, rank 1's lookup
    # through them is where its range and its rows disagree
    ("vocab_range", "embedding", "aten.embedding", [1], "rank-specific-mismatch"),
    ("missing_all_reduce", "ln2_af0", "_C.fused_add_rms_norm", [0, 1], "partial-sum-never-reduced"),
])
def test_small_qwen2_dump_bugs_are_violations(bug, node, op, ranks, kind):
    report, _ = verify_small(Config(), 2, bug)
    assert report.status == "violation", report.reason
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == (node, op, ranks, kind)


@pytest.mark.parametrize("edit", [{"qkv_*": "Shard(0)"}, {"gate_up*": "Shard(0)"}])
def test_small_qwen2_dump_with_wrong_relations_is_a_violation(edit):
    report, _ = verify_small(Config(), 2, spec_edit=edit)
    assert report.status == "violation", report.reason


def test_small_qwen2_dump_with_gate_up_stated_as_plain_rows_is_blamed_on_the_activation():
    # stated as Shard(0), rank 0's [gate | up] rows are all gate: silu_and_mul's up half reads gate
    report, _ = verify_small(Config(), 2, spec_edit={"gate_up*": "Shard(0)"})
    f = report.findings[0]
    assert (f.node, f.op, f.rank) == ("act_af0", "_C.silu_and_mul", [0, 1])


@pytest.mark.xfail(strict=True, reason="silu_and_mul reads one fused operand and splits it itself, so the engine "
                                       "cannot see that its up half holds gate elements: value-mismatch, not "
                                       "wrong-shard-offset")
def test_small_qwen2_dump_with_gate_up_stated_as_plain_rows_is_a_wrong_shard_offset():
    report, _ = verify_small(Config(), 2, spec_edit={"gate_up*": "Shard(0)"})
    assert report.findings[0].kind == "wrong-shard-offset"
