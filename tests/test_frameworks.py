"""Framework ops from graph dumps (apex, vLLM, logging) and engine limits on dumps: rules
prove correct sharded uses, and break on wrong ones; huge dumps give unknown, not a crash."""
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
    assert report.findings[0].rank == [1]


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
