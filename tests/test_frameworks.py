"""Framework ops from graph dumps (apex, vLLM, logging) and engine limits on dumps: rules
prove correct sharded uses, and break on wrong ones; huge dumps give unknown, not a crash."""
import pytest

from shardproof.engine.verify import verify_graphs
from shardproof.frontends.fx_text import parse_graph
from shardproof.ir.graph import DistributedProgram
from shardproof.relations.infer import resolve_inputs

HEADER = "class GraphModule(torch.nn.Module):\n"


def dump(body: str, signature: str) -> str:
    return HEADER + f"    def forward(self, {signature}):\n" + "".join(f"        {line}\n" for line in body.splitlines())


def verify_dumps(seq_text, rank_texts, spec=None):
    from shardproof.relations.infer import parse_spec
    seq = parse_graph(seq_text, "seq.py", world_size=1)
    dist = DistributedProgram([parse_graph(t, f"r{r}.py", world_size=len(rank_texts))
                               for r, t in enumerate(rank_texts)])
    bindings = resolve_inputs({n.name: n.shape for n in seq.inputs}, [{n.name: n.shape for n in g.inputs}
                              for g in dist.graphs], parse_spec(spec), by_shape=True)
    return verify_graphs(seq, dist, bindings)


LN = """fused_layer_norm_affine_fwd = torch.ops.apex.fused_layer_norm_affine_fwd.default(x, w, b, [8], 1e-05)
getitem: "f32[{rows}, 8]" = fused_layer_norm_affine_fwd[0]
log_tensor: "f32[{rows}, 8]" = torch.ops.tg.log_tensor.default(getitem, 'y')
return (log_tensor,)"""


def ln_dump(rows, eps="1e-05"):
    return dump(LN.format(rows=rows).replace("1e-05", eps), f'x: "f32[{rows}, 8]", w: "f32[8]", b: "f32[8]"')


def test_apex_layer_norm_on_row_shards_is_verified():
    report = verify_dumps(ln_dump(4), [ln_dump(2), ln_dump(2)], {"x": "Shard(0)"})
    assert report.status == "verified", report.reason
    assert report.outputs[0].holds == "Shard(0)"


def test_apex_layer_norm_with_another_eps_on_one_rank_is_a_violation():
    report = verify_dumps(ln_dump(4), [ln_dump(2), ln_dump(2, eps="1e-03")], {"x": "Shard(0)"})
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("fused_layer_norm_affine_fwd", "apex.fused_layer_norm_affine_fwd", [1],
                                              "rank-specific-mismatch")


RMS = """empty_like: "f32[4, {d}]" = torch.ops.aten.empty_like.default(x)
auto_functionalized = torch.ops.higher_order.auto_functionalized(torch.ops._C.rms_norm.default, result = empty_like, input = x, weight = w, epsilon = 1e-06)
getitem_1: "f32[4, {d}]" = auto_functionalized[1]
mm: "f32[4, {h}]" = torch.ops.aten.mm.default(getitem_1, wo)
all_reduce: "f32[4, {h}]" = torch.ops.vllm.all_reduce.default(mm, 'tp:0')
return (all_reduce,)"""


def test_vllm_rms_norm_and_all_reduce():
    # each rank holds a partial sum of the projection weight; vLLM's all_reduce completes it
    text = dump(RMS.format(d=8, h=6), 'x: "f32[4, 8]", w: "f32[8]", wo: "f32[8, 6]"')
    report = verify_dumps(text, [text, text], {"wo": 'Partial("sum")'})
    assert report.status == "verified", report.reason


def test_huge_dump_without_proof_is_unknown_not_a_crash():
    big = dump('cumsum: "f32[65536, 1024]" = torch.ops.aten.exp.default(x)\nreturn (cumsum,)', 'x: "f32[65536, 1024]"')
    other = dump('cumsum: "f32[65536, 1024]" = torch.ops.aten.tanh.default(x)\nreturn (cumsum,)', 'x: "f32[65536, 1024]"')
    report = verify_dumps(big, [other, other])
    assert report.status == "unknown" and "too large" in report.reason


def test_collective_over_a_group_of_one_in_the_single_device_dump():
    seq = dump('all_reduce: "f32[4]" = torch.ops._c10d_functional.all_reduce.default(x, "sum", "0")\n'
               'wait_tensor: "f32[4]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce)\n'
               'return (wait_tensor,)', 'x: "f32[4]"')
    ranks = [dump('all_reduce: "f32[4]" = torch.ops._c10d_functional.all_reduce.default(x, "sum", "0")\n'
                  'wait_tensor: "f32[4]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce)\n'
                  'return (wait_tensor,)', 'x: "f32[4]"')] * 2
    report = verify_dumps(seq, ranks, {"x": 'Partial("sum")'})
    assert report.status == "verified", report.reason


# ---------------------------------------------------------------- vLLM rotary embedding and attention

def _torch_rotary(positions, x, head_size, cache, is_neox):
    """vLLM's ``RotaryEmbedding.forward_native`` (the reference its CUDA kernel matches)."""
    import torch
    positions = positions.flatten()
    cos, sin = cache.index_select(0, positions).chunk(2, dim=-1)
    rot = cache.shape[-1]
    shape = x.shape
    x = x.view(positions.shape[0], -1, head_size)
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    x1, x2 = (torch.chunk(x_rot, 2, dim=-1) if is_neox else (x_rot[..., ::2], x_rot[..., 1::2]))
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = torch.cat((o1, o2), -1) if is_neox else torch.stack((o1, o2), -1).flatten(-2)
    return torch.cat((out, x_pass), -1).reshape(shape)


@pytest.mark.parametrize("is_neox,rot", [(True, 8), (False, 8), (True, 4), (False, 4)])
def test_rotary_embedding_numerics_match_vllm_reference(is_neox, rot):
    torch = pytest.importorskip("torch")
    import numpy as np
    from shardproof.ops.registry import lookup
    g = torch.Generator().manual_seed(0)
    positions = torch.tensor([3, 0, 7, 1, 1])
    q, k = torch.randn(5, 3 * 8, generator=g, dtype=torch.float64), torch.randn(5, 8, generator=g, dtype=torch.float64)
    cache = torch.randn(9, rot, generator=g, dtype=torch.float64)
    _, q_out, k_out = lookup("_C.rotary_embedding").numerics(
        positions=positions.numpy(), query=q.numpy(), key=k.numpy(), head_size=8, cos_sin_cache=cache.numpy(),
        is_neox=is_neox)
    assert np.allclose(q_out, _torch_rotary(positions, q, 8, cache, is_neox).numpy())
    assert np.allclose(k_out, _torch_rotary(positions, k, 8, cache, is_neox).numpy())


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (6, 2), (4, 1)])
def test_vllm_attention_numerics_match_causal_gqa_sdpa(heads, kv_heads):
    torch = pytest.importorskip("torch")
    import numpy as np
    from shardproof.ops.registry import lookup
    g = torch.Generator().manual_seed(1)
    q = torch.randn(7, heads, 4, generator=g, dtype=torch.float64)
    k, v = (torch.randn(7, kv_heads, 4, generator=g, dtype=torch.float64) for _ in range(2))
    _, out = lookup("vllm.unified_attention_with_output").numerics(
        query=q.numpy(), key=k.numpy(), value=v.numpy(), output=np.zeros((7, heads, 4)), layer_name="l0")
    rep = heads // kv_heads
    want = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1).repeat_interleave(rep, 0), v.transpose(0, 1).repeat_interleave(rep, 0),
        is_causal=True).transpose(0, 1)
    assert np.allclose(out, want.numpy())


ROPE = """rope = torch.ops.higher_order.auto_functionalized(torch.ops._C.rotary_embedding.default, positions = pos, query = q, key = k, head_size = 4, cos_sin_cache = cache, is_neox = {neox})
q_rot: "f32[6, {hq}]" = rope[1]
k_rot: "f32[6, {hk}]" = rope[2]
return (q_rot, k_rot)"""


def rope_dump(hq, hk, neox=True, rot=4):
    return dump(ROPE.format(hq=hq, hk=hk, neox=neox),
                f'pos: "i64[6]", q: "f32[6, {hq}]", k: "f32[6, {hk}]", cache: "f32[10, {rot}]"')


@pytest.mark.parametrize("rot", [4, 2])
def test_vllm_rotary_on_head_shards_is_verified(rot):
    # rot 2: only the first half of each head rotates (partial rotary)
    report = verify_dumps(rope_dump(16, 8, rot=rot), [rope_dump(8, 4, rot=rot), rope_dump(8, 4, rot=rot)],
                          {"q": "Shard(1)", "k": "Shard(1)", "pos": "Replicate()", "cache": "Replicate()"})
    assert report.status == "verified", report.reason
    assert [o.holds for o in report.outputs] == ["Shard(1)", "Shard(1)"]


def test_vllm_rotary_with_another_style_on_one_rank_is_a_violation():
    report = verify_dumps(rope_dump(16, 8), [rope_dump(8, 4), rope_dump(8, 4, neox=False)],
                          {"q": "Shard(1)", "k": "Shard(1)", "pos": "Replicate()", "cache": "Replicate()"})
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("rope", "_C.rotary_embedding", [1], "rank-specific-mismatch")


def test_vllm_rotary_cutting_a_head_in_two_is_a_wrong_dim():
    # ranks holding half of every head (Shard of head_size) see different pairs: never exact
    report = verify_dumps(rope_dump(16, 8), [rope_dump(8, 4), rope_dump(8, 4)],
                          {"q": "Interleaved(1, [2, 2, 2, 2, 2, 2, 2, 2])", "k": "Interleaved(1, [2, 2, 2, 2])",
                           "pos": "Replicate()", "cache": "Replicate()"})
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("rope", "_C.rotary_embedding", [0, 1], "wrong-dim")
    assert "along dim 1" in f.hint


ATTN = """buf: "f32[5, {hq}, 4]" = torch.ops.aten.empty.memory_format([5, {hq}, 4], dtype = torch.float32)
attn = torch.ops.higher_order.auto_functionalized(torch.ops.vllm.unified_attention_with_output.default, query = q, key = k, value = v, output = buf, layer_name = 'model.layers.0.self_attn.attn')
out: "f32[5, {hq}, 4]" = attn[1]
return (out,)"""


def attn_dump(hq, hk):
    return dump(ATTN.format(hq=hq), f'q: "f32[5, {hq}, 4]", k: "f32[5, {hk}, 4]", v: "f32[5, {hk}, 4]"')


@pytest.mark.parametrize("world", [2, 4])
def test_vllm_attention_on_grouped_head_shards_is_verified(world):
    # 8 query heads over 2 KV heads: at 4 ranks each KV head serves two ranks
    hk = max(2 // world, 1)
    kv = "Shard(1)" if world <= 2 else "Interleaved(1, [2], blocks=[2])"
    report = verify_dumps(attn_dump(8, 2), [attn_dump(8 // world, hk)] * world, {"q": "Shard(1)", "k": kv, "v": kv})
    assert report.status == "verified", report.reason
    assert report.outputs[0].holds == "Shard(1)"
    assert any("prefill" in a for a in report.assumptions)


def test_vllm_attention_with_the_wrong_kv_head_is_a_violation():
    # rank 1's query heads attend with KV head 0 instead of 1
    report = verify_dumps(attn_dump(8, 2), [attn_dump(4, 1)] * 2,
                          {"q": "Shard(1)", "k": "Slices(1, {0: (0, 1), 1: (0, 1)})", "v": "Shard(1)"})
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("attn", "vllm.unified_attention_with_output", [1], "wrong-shard-offset")
    assert "operand k " in f.hint and "rank 0" in f.hint
