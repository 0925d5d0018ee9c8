"""The dump executor in less memory (frontends/torch_stream.py): ranks run one at a time
with the others' values spilled to disk, and f32 values held in float32; both give the
values of the ordinary run (within the dtype), and the streaming estimate counts one rank."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardproof.api import prepare_dumps  # noqa: E402
from shardproof.frontends import torch_stream  # noqa: E402
from shardproof.frontends.torch_exec import draw_program_inputs, estimate_bytes, execute  # noqa: E402

ROWS = 64


def _mlp(cols: int, reduce: bool) -> str:
    """x @ w1 -> relu -> @ w2 (row-parallel: all-reduced when `reduce`), with a value
    (relu) kept alive across the collective."""
    tail = ('ar: "f32[64, 48]" = torch.ops._c10d_functional.all_reduce.default(mm2, "sum", "0")\n'
            'out: "f32[64, 48]" = torch.ops._c10d_functional.wait_tensor.default(ar)\n' if reduce else
            'out: "f32[64, 48]" = torch.ops.aten.clone.default(mm2)\n')
    body = (f'mm: "f32[64, {cols}]" = torch.ops.aten.mm.default(x, w1)\n'
            f'relu: "f32[64, {cols}]" = torch.ops.aten.relu.default(mm)\n'
            f'mm2: "f32[64, 48]" = torch.ops.aten.mm.default(relu, w2)\n' + tail +
            f's: "f32[64, {cols}]" = torch.ops.aten.sigmoid.default(relu)\n'
            'ar2: "f32[64, 48]" = torch.ops._c10d_functional.all_reduce.default(out, "max", "0")\n'
            'out2: "f32[64, 48]" = torch.ops._c10d_functional.wait_tensor.default(ar2)\n'
            'm: "f32[64]" = torch.ops.aten.sum.dim_IntList(s, [1])\n')
    if not reduce:
        body = body.replace('ar2: "f32[64, 48]" = torch.ops._c10d_functional.all_reduce.default(out, "max", "0")\n'
                            'out2: "f32[64, 48]" = torch.ops._c10d_functional.wait_tensor.default(ar2)\n',
                            'out2: "f32[64, 48]" = torch.ops.aten.clone.default(out)\n')
    lines = "".join(f"        {ln}\n" for ln in body.strip().splitlines())
    return (f'class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[64, 32]", w1: "f32[32, {cols}]", '
            f'w2: "f32[{cols}, 48]"):\n' + lines + "        return (out2,)\n")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    (root / "tp1").mkdir()
    (root / "tp2").mkdir()
    (root / "tp1" / "fw.g0.r0.py").write_text(_mlp(256, False))
    for r in range(2):
        (root / "tp2" / f"fw.g0.r{r}.py").write_text(_mlp(128, True))
    rel = root / "rel.yaml"
    rel.write_text("inputs:\n  x: Replicate()\n  w1: Shard(1)\n  w2: Shard(0)\nexpect:\n  out2: Replicate()\n")
    p = prepare_dumps(str(root / "tp1"), str(root / "tp2"), str(rel))
    return p, draw_program_inputs(p.seq, p.dist, p.bindings, 0)


def test_ranks_one_at_a_time_give_the_same_values(prepared, monkeypatch):
    p, (s_in, d_in) = prepared
    s_ref, d_ref = execute(p.seq, p.dist, s_in, d_in)
    seen = []  # when a rank runs, the largest tensor the other rank still holds in memory
    switch = torch_stream.Spill.switch_to

    def spy(self, rank, env):
        switch(self, rank, env)
        others = [v for r, e in self.envs.items() if r != rank for v in e.values() if torch.is_tensor(v)]
        seen.append(max((v.numel() for v in others), default=0))
    monkeypatch.setattr(torch_stream.Spill, "switch_to", spy)
    s_out, d_out = execute(p.seq, p.dist, s_in, d_in, stream=True)
    assert max(seen) <= 1024 and len(seen) > 10  # the relu kept across the collectives was on disk
    assert np.array_equal(s_out["out2"], s_ref["out2"])
    assert all(np.array_equal(a["out2"], b["out2"]) for a, b in zip(d_out, d_ref))
    assert np.allclose(d_out[0]["out2"], s_ref["out2"])


def test_floats_held_as_declared_halve_the_estimate_and_agree(prepared):
    p, (s_in, d_in) = prepared
    wide = estimate_bytes(p.seq, p.dist)
    with torch_stream.held_as_declared():
        narrow = estimate_bytes(p.seq, p.dist)
    assert narrow[0] * 2 == wide[0] and narrow[1] == wide[1]
    streamed = estimate_bytes(p.seq, p.dist, stream=True)
    assert streamed[0] <= wide[0]
    s_out, d_out = execute(p.seq, p.dist, s_in, d_in, precision="declared", stream=True)
    s_ref, _ = execute(p.seq, p.dist, s_in, d_in)
    assert s_out["out2"].dtype == np.float32
    assert np.allclose(s_out["out2"], s_ref["out2"], rtol=1e-4, atol=1e-4)
    assert np.allclose(d_out[1]["out2"], s_ref["out2"], rtol=1e-4, atol=1e-4)


REPLICATED = ('class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[64, 32]", w: "f32[32, 256]"):\n'
              '        mm: "f32[64, 256]" = torch.ops.aten.mm.default(x, w)\n'
              '        t: "f32[64, 256]" = torch.ops.aten.tanh.default(mm)\n{}'
              '        return (out,)\n')


def test_confirmation_streams_where_the_plain_run_does_not_fit(tmp_path, monkeypatch):
    # every rank computes the whole (replicated) value: one rank at a time needs half the memory
    import shardproof.api as api
    import shardproof.api_confirm as api_confirm
    from shardproof.engine.budget import budget
    for folder, ranks, tail in (("tp1", 1, '        out: "f32[64, 256]" = torch.ops.aten.mul.Tensor(t, mm)\n'),
                                ("tp2", 2, '        ar: "f32[64, 256]" = torch.ops._c10d_functional.all_reduce.default'
                                           '(t, "max", "0")\n        w8: "f32[64, 256]" = torch.ops._c10d_functional.'
                                           'wait_tensor.default(ar)\n        out: "f32[64, 256]" = '
                                           'torch.ops.aten.mul.Tensor(w8, mm)\n')):
        (tmp_path / folder).mkdir()
        for r in range(ranks):
            (tmp_path / folder / f"fw.g0.r{r}.py").write_text(REPLICATED.format(tail))
    (tmp_path / "rel.yaml").write_text("inputs:\n  x: Replicate()\n  w: Replicate()\nexpect:\n  out: Replicate()\n")
    p = prepare_dumps(str(tmp_path / "tp1"), str(tmp_path / "tp2"), str(tmp_path / "rel.yaml"))
    wide, streamed = estimate_bytes(p.seq, p.dist)[0], estimate_bytes(p.seq, p.dist, stream=True)[0]
    assert streamed < wide
    spills = []
    init = torch_stream.Spill.__init__

    def counted(self, *a, **k):
        init(self, *a, **k)
        spills.append(self)
    monkeypatch.setattr(torch_stream.Spill, "__init__", counted)
    monkeypatch.setattr(api_confirm, "EXEC_BYTES", streamed)  # fits one rank at a time only
    report = api.verify_prepared(p)
    assert report.status == "verified" and report.confirmation.outcome == "confirmed" and spills
    monkeypatch.setattr(api_confirm, "EXEC_BYTES", 1)  # fits no way: honestly unconfirmed
    report = api.verify_prepared(p)
    assert report.status == "unknown" and "too large to execute here" in report.confirmation.detail
    with budget(max_bytes=64 << 30):  # --max-memory is the bound where given
        assert api.verify_prepared(p).confirmation.outcome == "confirmed"
