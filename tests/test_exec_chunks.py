"""Chunked execution (frontends/torch_chunks.py): the largest values computed a chunk at a
time give the values of the whole run -- attention (baddbmm -> view -> masked_fill ->
softmax -> dropout with corresponding draws -> bmm, sharded by heads) and a vocabulary
tail (mm -> max -> sub -> exp -> sum, an index gather) -- with several chunk counts; a
draw's range is the whole draw's values; a region a node cannot take in chunks runs whole."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardproof.api import prepare_dumps, verify_dumps  # noqa: E402
from shardproof.engine.rng import plan_randomness  # noqa: E402
from shardproof.frontends import torch_chunks  # noqa: E402
from shardproof.frontends.torch_chunks import block, block_index, plan_chunks  # noqa: E402
from shardproof.frontends.torch_exec import draw_program_inputs, estimate_bytes, execute  # noqa: E402
from shardproof.frontends.torch_rng import Randomness  # noqa: E402

H, S, D = 4, 16, 8  # heads, sequence, head size


def _attention(heads: int, p: float) -> str:
    """softmax(q k^T / sqrt(D) masked) dropped out, times v; heads in the batch dim."""
    body = f'''
        empty: "f32[{heads}, {S}, {S}]" = torch.ops.aten.empty.memory_format([{heads}, {S}, {S}], dtype = torch.float32, device = device(type='cpu'), pin_memory = False)
        kt: "f32[{heads}, {D}, {S}]" = torch.ops.aten.transpose.int(k, 1, 2)
        baddbmm: "f32[{heads}, {S}, {S}]" = torch.ops.aten.baddbmm.default(empty, q, kt, beta = 0.0, alpha = 0.35)
        view: "f32[1, {heads}, {S}, {S}]" = torch.ops.aten.view.default(baddbmm, [1, {heads}, {S}, {S}])
        masked_fill: "f32[1, {heads}, {S}, {S}]" = torch.ops.aten.masked_fill.Scalar(view, mask, -10000.0)
        _softmax: "f32[1, {heads}, {S}, {S}]" = torch.ops.aten._softmax.default(masked_fill, -1, False)
        native_dropout = torch.ops.aten.native_dropout.default(_softmax, {p}, True)
        getitem: "f32[1, {heads}, {S}, {S}]" = native_dropout[0]
        getitem_1: "b8[1, {heads}, {S}, {S}]" = native_dropout[1]
        view_1: "f32[{heads}, {S}, {S}]" = torch.ops.aten.view.default(getitem, [{heads}, {S}, -1])
        bmm: "f32[{heads}, {S}, {D}]" = torch.ops.aten.bmm.default(view_1, v)
        out: "f32[{heads}, {S}, {D}]" = torch.ops.aten.mul.Tensor(bmm, 2.0)'''
    lines = "".join(f"        {ln.strip()}\n" for ln in body.strip("\n").splitlines())
    return (f'class GraphModule(torch.nn.Module):\n    def forward(self, q: "f32[{heads}, {S}, {D}]", '
            f'k: "f32[{heads}, {S}, {D}]", v: "f32[{heads}, {S}, {D}]", mask: "b8[1, 1, {S}, {S}]"):\n'
            + lines + "        return (out,)\n")


def _vocab() -> str:
    """A cross-entropy-like tail over a [32, 48] vocabulary projection, viewed [8, 4, 48]."""
    body = '''
        t: "f32[16, 48]" = torch.ops.aten.t.default(w)
        mm: "f32[32, 48]" = torch.ops.aten.mm.default(x, t)
        view: "f32[8, 4, 48]" = torch.ops.aten.view.default(mm, [8, 4, 48])
        max_1 = torch.ops.aten.max.dim(view, -1)
        getitem: "f32[8, 4]" = max_1[0]
        clone: "f32[8, 4, 48]" = torch.ops.aten.clone.default(view)
        unsqueeze: "f32[8, 4, 1]" = torch.ops.aten.unsqueeze.default(getitem, -1)
        sub: "f32[8, 4, 48]" = torch.ops.aten.sub.Tensor(clone, unsqueeze)
        arange: "i64[32]" = torch.ops.aten.arange.start(0, 32, device = device(type='cpu'), pin_memory = False)
        view_1: "f32[32, 48]" = torch.ops.aten.view.default(sub, [-1, 48])
        index: "f32[32]" = torch.ops.aten.index.Tensor(view_1, [arange, labels])
        exp: "f32[8, 4, 48]" = torch.ops.aten.exp.default(sub)
        copy: "f32[8, 4, 48]" = torch.ops.aten.copy.default(sub, exp)
        sum_1: "f32[8, 4]" = torch.ops.aten.sum.dim_IntList(copy, [-1])
        log: "f32[8, 4]" = torch.ops.aten.log.default(sum_1)
        view_2: "f32[32]" = torch.ops.aten.view.default(log, [32])
        sub_1: "f32[32]" = torch.ops.aten.sub.Tensor(view_2, index)'''
    lines = "".join(f"        {ln.strip()}\n" for ln in body.strip("\n").splitlines())
    return ('class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[32, 16]", w: "f32[48, 16]", '
            'labels: "i64[32]"):\n' + lines + "        return (sub_1,)\n")


def _pair(root, name, seq, ranks, rel):
    (root / name / "tp1").mkdir(parents=True)
    (root / name / "tp2").mkdir()
    (root / name / "tp1" / "fw.g0.r0.py").write_text(seq)
    for r, text in enumerate(ranks):
        (root / name / "tp2" / f"fw.g0.r{r}.py").write_text(text)
    (root / name / "rel.yaml").write_text(rel)
    return tuple(str(root / name / x) for x in ("tp1", "tp2", "rel.yaml"))


ATT_REL = ("inputs:\n  q: Shard(0)\n  k: Shard(0)\n  v: Shard(0)\n  mask: Replicate()\n"
           "expect:\n  out: Shard(0)\n")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("chunks")
    att = _pair(root, "att", _attention(H, 0.25), [_attention(H // 2, 0.25)] * 2, ATT_REL)
    voc = _pair(root, "voc", _vocab(), [_vocab()] * 2, "inputs:\n  x: Replicate()\n  w: Replicate()\n"
                "  labels: Replicate()\nexpect:\n  sub_1: Replicate()\n")
    return {"att": att, "voc": voc}


@pytest.fixture(scope="module")
def prepared(dumps):
    return {k: prepare_dumps(*v) for k, v in dumps.items()}


def _small(monkeypatch, lazy: int, piece: int):
    monkeypatch.setattr(torch_chunks, "LAZY_BYTES", lazy)
    monkeypatch.setattr(torch_chunks, "CHUNK_BYTES", piece)


def _run(p, seed, chunks, precision="f64"):
    s_in, d_in = draw_program_inputs(p.seq, p.dist, p.bindings, seed)
    rnd = plan_randomness(p.seq, p.dist, p.bindings)
    return execute(p.seq, p.dist, s_in, d_in, randomness=rnd, seed=seed, chunks=chunks, stream=True,
                   precision=precision)


def _same(a, b, exact: bool):
    (sa, da), (sb, db) = a, b
    for x, y in [(sa, sb)] + list(zip(da, db)):
        assert x.keys() == y.keys()
        for k in x:
            if exact:
                assert np.array_equal(x[k], y[k]), k
            else:
                np.testing.assert_allclose(x[k], y[k], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("piece,n", [(5000, 2), (1200, 8), (300, 32)])
def test_attention_in_chunks_is_the_whole_run(prepared, monkeypatch, piece, n):
    """Scores of 8 KiB (float64), chunks of at most `piece` bytes: by batch (heads), and with
    32 chunks by rows within a head."""
    p = prepared["att"]
    whole = _run(p, 1, False)
    _small(monkeypatch, 6000, piece)
    plan = plan_chunks(p.seq)
    bmm = next(n for n in p.seq.nodes if n.name == "bmm")
    sink = plan.sinks[bmm]  # the scores, probabilities and dropout exist only a chunk at a time
    assert {n.name for n in sink.cone} >= {"baddbmm", "masked_fill", "_softmax", "native_dropout", "view_1"}
    assert sink.n == n and block((H, S, D), n)[0] == (0 if n <= H else 1)  # by heads, else rows of a head
    assert {n.name for n in plan.lazy} & {"out", "bmm"} == set() and not plan.whole
    chunked = _run(p, 1, True)
    _same(whole, chunked, exact=False)  # bmm over fewer batches may block its sums differently
    assert whole[0]["out"].shape == (H, S, D) and np.abs(whole[0]["out"]).sum() > 0


def test_attention_dropout_draws_correspond_in_chunks(prepared, monkeypatch):
    """The ranks' chunks draw the single device's elements: the confirmation holds."""
    p = prepared["att"]
    _small(monkeypatch, 3000, 1024)
    (single, ranks) = _run(p, 2, True)
    np.testing.assert_allclose(np.concatenate([r["out"] for r in ranks]), single["out"], rtol=1e-10, atol=1e-12)


def test_vocabulary_tail_in_chunks_is_the_whole_run(prepared, monkeypatch):
    p = prepared["voc"]
    whole = _run(p, 3, False)
    _small(monkeypatch, 1024, 512)
    plan = plan_chunks(p.seq)
    sinks = {s.node.name: s for s in plan.sinks.values()}
    assert set(sinks) == {"max_1", "index", "sum_1"} and all(s.n > 1 for s in sinks.values())
    assert {n.name for n in sinks["sum_1"].cone} == {"mm", "view", "clone", "sub", "exp", "copy"}
    assert [n.name for n in sinks["index"].fused] == ["sum_1"]  # after max's all-reduce: one pass for both
    _same(whole, _run(p, 3, True), exact=False)


def _rows(rows: int) -> str:
    """exp(2x), softmax over the last dim, dropped out, summed over the last dim."""
    body = f'''
        mul: "f32[{rows}, 16, 16]" = torch.ops.aten.mul.Tensor(x, 2.0)
        exp: "f32[{rows}, 16, 16]" = torch.ops.aten.exp.default(mul)
        _softmax: "f32[{rows}, 16, 16]" = torch.ops.aten._softmax.default(exp, -1, False)
        native_dropout = torch.ops.aten.native_dropout.default(_softmax, 0.5, True)
        getitem: "f32[{rows}, 16, 16]" = native_dropout[0]
        sum_1: "f32[{rows}, 16]" = torch.ops.aten.sum.dim_IntList(getitem, [-1])'''
    lines = "".join(f"        {ln.strip()}\n" for ln in body.strip("\n").splitlines())
    return (f'class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[{rows}, 16, 16]"):\n' + lines
            + "        return (sum_1,)\n")


def test_elementwise_chunks_are_bitwise(tmp_path, monkeypatch):
    """Without a matmul in the chunked region (elementwise ops, softmax, dropout, a sum over
    the rows), chunked values are torch's whole-run values bitwise."""
    p = prepare_dumps(*_pair(tmp_path, "rows", _rows(8), [_rows(4)] * 2,
                             "inputs:\n  x: Shard(0)\nexpect:\n  sum_1: Shard(0)\n"))
    whole = _run(p, 4, False)
    _small(monkeypatch, 2048, 1024)
    assert plan_chunks(p.seq).sinks[next(n for n in p.seq.nodes if n.name == "sum_1")].n == 16
    chunked = _run(p, 4, True)
    _same(whole, chunked, exact=True)
    np.testing.assert_array_equal(np.concatenate([r["sum_1"] for r in chunked[1]]), chunked[0]["sum_1"])


def test_a_node_that_cannot_take_chunks_gets_the_value_whole(tmp_path, monkeypatch):
    """A permute of a lazy value is not chunk-independent over the leading dim: the value
    is assembled whole before it (its own inputs kept alive until then), as the whole run."""
    seq = _rows(8).replace("        return (sum_1,)", '''        perm: "f32[16, 16, 8]" = torch.ops.aten.permute.default(getitem, [2, 1, 0])
        sum_2: "f32[16, 16]" = torch.ops.aten.sum.dim_IntList(perm, [-1])
        add: "f32[16, 16]" = torch.ops.aten.add.Tensor(sum_2, 1.0)
        return (sum_1, add)''')
    ranks = [_rows(4).replace("        return (sum_1,)", '''        perm: "f32[16, 16, 4]" = torch.ops.aten.permute.default(getitem, [2, 1, 0])
        sum_2: "f32[16, 16]" = torch.ops.aten.sum.dim_IntList(perm, [-1])
        ar: "f32[16, 16]" = torch.ops._c10d_functional.all_reduce.default(sum_2, "sum", "0")
        w: "f32[16, 16]" = torch.ops._c10d_functional.wait_tensor.default(ar)
        add: "f32[16, 16]" = torch.ops.aten.add.Tensor(w, 1.0)
        return (sum_1, add)''')] * 2
    p = prepare_dumps(*_pair(tmp_path, "perm", seq, ranks,
                             "inputs:\n  x: Shard(0)\nexpect:\n  sum_1: Shard(0)\n  add: Replicate()\n"))
    whole = _run(p, 6, False)
    _small(monkeypatch, 2048, 1024)
    plan = plan_chunks(p.seq)
    assert {n.name for n in plan.whole} == {"getitem"} and "sum_1" in {s.node.name for s in plan.sinks.values()}
    _same(whole, _run(p, 6, True), exact=True)


def test_blocks_of_a_shape():
    assert block((8, 24, 6, 6), 32) == (1, 6) and block((8, 24, 6, 6), 8) == (0, 1)
    assert block((8, 24, 6, 6), 8 * 24 * 2) == (2, 3) and block((8, 24, 6, 6), 7) is None
    assert block((6, 5), 4) is None  # 7.5 elements a chunk
    x = torch.arange(8 * 24 * 36).reshape(8, 24, 6, 6)
    for n in (8, 32, 96, 8 * 24 * 2):
        pc = block(tuple(x.shape), n)
        flat = torch.cat([x[block_index(tuple(x.shape), pc, i)].reshape(-1) for i in range(n)])
        assert torch.equal(flat, x.reshape(-1))  # chunk i is elements [i*E, (i+1)*E)


def test_draw_ranges_are_the_whole_draw(prepared, monkeypatch):
    monkeypatch.setattr("shardproof.frontends.torch_rng.BLOCK", 100)  # ranges straddle generator blocks
    p = prepared["att"]
    plan = plan_randomness(p.seq, p.dist, p.bindings)
    rnd = Randomness(plan, 5, "cpu")
    node = next(n for n in p.seq.nodes if n.name == "native_dropout")
    whole = rnd.draw(None, node).reshape(-1)
    for start, count in [(0, 7), (95, 10), (250, 300), (whole.numel() - 3, 3)]:
        assert torch.equal(rnd.draw_range(None, node, start, count), whole[start:start + count])
    rank_node = next(n for n in p.dist.graphs[1].nodes if n.name == "native_dropout")
    mine = rnd.draw(1, rank_node)
    assert torch.equal(mine, whole.reshape(1, H, S, S)[:, H // 2:])  # rank 1's heads of the draw
    for start, count in [(3, 40), (S * S - 5, 17)]:
        assert torch.equal(rnd.draw_range(1, rank_node, start, count), mine.reshape(-1)[start:start + count])


def test_estimate_counts_one_chunk(prepared, monkeypatch):
    p = prepared["att"]
    before = estimate_bytes(p.seq, p.dist, stream=True)[0]
    _small(monkeypatch, 6000, 1024)
    after = estimate_bytes(p.seq, p.dist, stream=True, chunks=True)[0]
    assert after < before


def test_verified_and_confirmed_with_chunks(dumps, monkeypatch):
    """A confirmation that fits only chunked runs chunked, and is confirmed."""
    import shardproof.api_confirm as api_confirm
    _small(monkeypatch, 2000, 256)
    p = prepare_dumps(*dumps["att"])
    from shardproof.frontends.torch_stream import fitting, held_as_declared
    with held_as_declared():
        need = estimate_bytes(p.seq, p.dist, chunks=True)[0]
    assert fitting(p.seq, p.dist, need)[3] == {"precision": "declared", "chunks": True}
    monkeypatch.setattr(api_confirm, "EXEC_BYTES", need)
    report = verify_dumps(*dumps["att"])
    c = report.confirmation
    assert report.status == "verified" and c.outcome == "confirmed", (report.status, c)
    assert "a chunk at a time" in c.detail and "a chunk at a time" in report.to_json()["confirmation"]["detail"]
