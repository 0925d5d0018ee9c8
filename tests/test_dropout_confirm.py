"""Dumps with random ops (training-mode dropout, a bernoulli mask) are confirmed by execution
with corresponding randomness (engine/rng.py, frontends/torch_rng.py): the single-device
program draws from a seed, each rank receives the piece of that draw its proved relation
names. A rank that uses another rank's mask slice or another p is a violation; a random op
whose values correspond to no single-device draw cannot be run: unknown, never verified."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardproof.api import prepare_dumps, verify_dumps  # noqa: E402
from shardproof.engine.rng import plan_randomness  # noqa: E402
from shardproof.frontends.torch_exec import NotExecutable, draw_program_inputs, execute  # noqa: E402

HEAD = 'class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[{rows}, 6]", w: "f32[6, 4]"):\n'


def _graph(rows: int, body: str, ret: str) -> str:
    lines = "".join(f"        {ln.strip()}\n" for ln in body.strip("\n").splitlines())
    return HEAD.format(rows=rows) + lines + f"        return ({ret},)\n"


def _dropout(rows: int, p: float = 0.5) -> str:
    """h = x @ w, dropped out with p (native_dropout)."""
    return _graph(rows, f'''
        mm: "f32[{rows}, 4]" = torch.ops.aten.mm.default(x, w)
        native_dropout = torch.ops.aten.native_dropout.default(mm, {p}, True)
        getitem: "f32[{rows}, 4]" = native_dropout[0]
        getitem_1: "b8[{rows}, 4]" = native_dropout[1]''', "getitem")


def _mask(rows: int, lo: int | None = None) -> str:
    """h = x @ w times a bernoulli mask drawn on the whole [8, 4] tensor (then the rank's rows
    [lo, lo + rows) of it when `lo` is given), scaled by 1 / 0.9."""
    cut = "" if lo is None else f'piece: "f32[{rows}, 4]" = torch.ops.aten.slice.Tensor(bernoulli, 0, {lo}, {lo + rows})'
    return _graph(rows, f'''
        mm: "f32[{rows}, 4]" = torch.ops.aten.mm.default(x, w)
        empty: "f32[8, 4]" = torch.ops.aten.empty.memory_format([8, 4], dtype = torch.float32, device = device(type='cpu'), pin_memory = False)
        bernoulli: "f32[8, 4]" = torch.ops.aten.bernoulli.p(empty, 0.9)
        {cut}
        mul: "f32[{rows}, 4]" = torch.ops.aten.mul.Tensor(mm, {"bernoulli" if lo is None else "piece"})
        div: "f32[{rows}, 4]" = torch.ops.aten.div.Tensor(mul, 0.9)''', "div")


def _pair(tmp_path, seq: str, ranks: list[str], name="d"):
    (tmp_path / name / "tp1").mkdir(parents=True)
    (tmp_path / name / "tp2").mkdir()
    (tmp_path / name / "tp1" / "fw.g0.r0.py").write_text(seq)
    for r, text in enumerate(ranks):
        (tmp_path / name / "tp2" / f"fw.g0.r{r}.py").write_text(text)
    rel = tmp_path / name / "rel.yaml"
    rel.write_text("inputs:\n  x: Shard(0)\n  w: Replicate()\nexpect:\n  " + ("getitem" if "native_dropout" in seq
                                                                             else "div") + ": Shard(0)\n")
    return str(tmp_path / name / "tp1"), str(tmp_path / name / "tp2"), str(rel)


def test_sharded_dropout_is_proved_and_confirmed(tmp_path):
    seq, dist, rel = _pair(tmp_path, _dropout(8), [_dropout(4), _dropout(4)])
    report = verify_dumps(seq, dist, rel)
    c = report.confirmation
    assert report.status == "verified" and (c.by, c.outcome) == ("torch", "confirmed"), (report, c)
    # each rank's draw is its Shard(0) rows of the single-device draw
    p = prepare_dumps(seq, dist, rel)
    plan = plan_randomness(p.seq, p.dist, p.bindings)
    draws = [plan.ranks[r]["native_dropout"] for r in range(2)]
    assert [d.seq_node for d in draws] == ["native_dropout"] * 2 and plan.blocked is None
    assert [d.positions[0].tolist() for d in draws] == [[0, 1, 2, 3], [4, 5, 6, 7]] and draws[0].positions[1] is None
    s_in, d_in = draw_program_inputs(p.seq, p.dist, p.bindings, 0)
    s_out, d_out = execute(p.seq, p.dist, s_in, d_in, randomness=plan, seed=3)
    whole = s_out["getitem"]
    dropped = np.isclose(whole, 0)
    assert 0 < dropped.sum() < whole.size  # dropout really dropped some elements, and kept the others
    assert np.allclose(np.concatenate([d["getitem"] for d in d_out]), whole)
    # another seed: another mask, the ranks still following it
    s2, d2 = execute(p.seq, p.dist, s_in, d_in, randomness=plan, seed=4)
    assert not np.array_equal(np.isclose(s2["getitem"], 0), dropped)
    assert np.allclose(np.concatenate([d["getitem"] for d in d2]), s2["getitem"])
    with pytest.raises(NotExecutable):  # without the correspondence, dropout is not run
        execute(p.seq, p.dist, s_in, d_in)


def test_mask_drawn_whole_and_sliced_is_confirmed(tmp_path):
    seq, dist, rel = _pair(tmp_path, _mask(8), [_mask(4, 0), _mask(4, 4)])
    report = verify_dumps(seq, dist, rel)
    assert report.status == "verified" and report.confirmation.outcome == "confirmed", report
    p = prepare_dumps(seq, dist, rel)
    plan = plan_randomness(p.seq, p.dist, p.bindings)
    assert all(d.positions == (None, None) for d in (plan.ranks[0]["bernoulli"], plan.ranks[1]["bernoulli"]))


def test_a_rank_using_another_ranks_mask_slice_is_a_violation(tmp_path):
    seq, dist, rel = _pair(tmp_path, _mask(8), [_mask(4, 4), _mask(4, 4)])
    report = verify_dumps(seq, dist, rel)
    assert report.status == "violation", report
    f = report.findings[0]
    assert f.rank == [0] and f.node in ("piece", "mul", "div"), f


def test_a_rank_dropping_with_another_p_is_a_violation(tmp_path):
    seq, dist, rel = _pair(tmp_path, _dropout(8), [_dropout(4), _dropout(4, p=0.25)])
    report = verify_dumps(seq, dist, rel)
    assert report.status == "violation", report
    f = report.findings[0]
    assert f.rank == [1] and f.op == "aten.native_dropout", f


def test_a_draw_with_no_single_device_counterpart_cannot_be_run(tmp_path):
    # rank 1 also draws noise it never uses: proved, but no run can give it corresponding values
    extra = _dropout(4).replace("        return", '        noise: "f32[4, 4]" = torch.ops.aten.rand.default([4, 4], '
                                "device = device(type='cpu'), pin_memory = False)\n        return")
    seq, dist, rel = _pair(tmp_path, _dropout(8), [_dropout(4), extra])
    report = verify_dumps(seq, dist, rel)
    assert report.status == "unknown" and report.confirmation.outcome == "skipped", report
    assert "noise on rank 1" in report.reason and "corresponding randomness" in report.reason


# ---------------------------------------------------------------- the labels, on a real gloo group

X, W = np.random.default_rng(7).standard_normal((8, 6)), np.random.default_rng(8).standard_normal((6, 4))


def _masked(lo_of_rank):
    """Each rank's `_mask` program in PyTorch: the seed replicated (torch.manual_seed on every
    rank, as a data-parallel program seeds), the mask drawn whole, the rows [lo, lo + 4) taken."""
    def program(rank, world):
        torch.manual_seed(1234)
        h = torch.tensor(X[4 * rank:4 * rank + 4]) @ torch.tensor(W)
        mask = torch.empty(8, 4, dtype=torch.float64).bernoulli_(0.9)
        lo = lo_of_rank(rank)
        return (h * mask[lo:lo + 4] / 0.9).numpy()
    return program


def test_mask_pairs_are_labelled_by_pytorch_on_gloo():
    from gloo import run_fn_on_gloo
    torch.manual_seed(1234)
    whole = (torch.tensor(X) @ torch.tensor(W) * torch.empty(8, 4, dtype=torch.float64).bernoulli_(0.9) / 0.9).numpy()
    right = run_fn_on_gloo(_masked(lambda r: 4 * r), 2)
    wrong = run_fn_on_gloo(_masked(lambda r: 4), 2)
    assert np.allclose(np.concatenate(right), whole)  # correct: each rank holds its Shard(0) rows
    assert not np.allclose(wrong[0], whole[:4]) and np.allclose(wrong[1], whole[4:])  # rank 0 is wrong
