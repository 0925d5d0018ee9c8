"""A dump whose output is a partial sum across the ranks (a gradient before the reduction
that runs outside the graph, or a missing all-reduce) is never verified silently: unknown
naming the output and the next step, unless the user allows it (--allow-partial-outputs,
YAML partial_outputs:), then verified up to a reduction the graph does not contain."""
import numpy as np
import pytest

pytest.importorskip("torch")

from shardproof.api import verify_dumps  # noqa: E402


def _graph(cols: int, reduce: bool) -> str:
    tail = ('        ar: "f32[8, 4]" = torch.ops._c10d_functional.all_reduce.default(mm, "sum", "0")\n'
            '        grad: "f32[8, 4]" = torch.ops._c10d_functional.wait_tensor.default(ar)\n' if reduce else
            '        grad: "f32[8, 4]" = torch.ops.aten.mul.Tensor(mm, 2.0)\n')
    if reduce:
        tail = tail.replace("(mm,", "(mul,").replace("        ar:", '        mul: "f32[8, 4]" = '
                                                    'torch.ops.aten.mul.Tensor(mm, 2.0)\n        ar:')
    return ('class GraphModule(torch.nn.Module):\n'
            f'    def forward(self, x: "f32[8, {cols}]", w: "f32[{cols}, 4]"):\n'
            '        mm: "f32[8, 4]" = torch.ops.aten.mm.default(x, w)\n' + tail + "        return (grad,)\n")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("partial")
    for folder, cols, ranks, reduce in (("tp1", 6, 1, False), ("tp2", 3, 2, False), ("tp2r", 3, 2, True)):
        (root / folder).mkdir()
        for r in range(ranks):
            (root / folder / f"fw.g0.r{r}.py").write_text(_graph(cols, reduce))
    (root / "rel.yaml").write_text("inputs:\n  x: Shard(1)\n  w: Shard(0)\n")
    (root / "allow.yaml").write_text("inputs:\n  x: Shard(1)\n  w: Shard(0)\npartial_outputs: [grad]\n")
    return root


def test_partial_output_is_unknown_naming_it_and_the_next_step(dumps):
    report = verify_dumps(dumps / "tp1", dumps / "tp2", str(dumps / "rel.yaml"), auto_relations=True)
    assert report.status == "unknown" and report.partial_outputs == []
    assert [(o.name, o.holds) for o in report.outputs] == [("grad", 'Partial("sum")')]
    assert "grad (Partial(\"sum\"))" in report.reason and "--allow-partial-outputs grad" in report.reason
    assert report.confirmation is None  # not run: nothing to confirm as verified


def test_allowed_partial_output_is_verified_up_to_the_reduction(dumps):
    for kw, rel in (({"allow_partial_outputs": ["grad"]}, "rel.yaml"), ({"allow_partial_outputs": ["*"]}, "rel.yaml"),
                    ({}, "allow.yaml")):
        report = verify_dumps(dumps / "tp1", dumps / "tp2", str(dumps / rel), auto_relations=True, **kw)
        assert report.status == "verified" and report.partial_outputs == ["grad"], (kw, rel, report)
        assert report.confirmation.outcome == "confirmed"  # the ranks' values sum to the single-device one
        assert report.to_json()["partial_outputs"] == ["grad"]


def test_reduced_output_needs_no_allowance_and_stated_expectations_rule(dumps):
    report = verify_dumps(dumps / "tp1", dumps / "tp2r", str(dumps / "rel.yaml"), auto_relations=True)
    assert report.status == "verified" and report.partial_outputs == [], report
    report = verify_dumps(dumps / "tp1", dumps / "tp2", str(dumps / "rel.yaml"), expect={"grad": 'Partial("sum")'})
    assert report.status == "verified" and report.partial_outputs == [], report  # stated: judged by it alone
    report = verify_dumps(dumps / "tp1", dumps / "tp2", str(dumps / "rel.yaml"), expect={"grad": "Replicate()"},
                          allow_partial_outputs=["*"])
    assert report.status == "violation", report


def test_cli_flag(dumps, capsys):
    from shardproof.cli import main
    cli = ["verify", "--seq", str(dumps / "tp1"), "--dist", str(dumps / "tp2"), "--relations", str(dumps / "rel.yaml"),
           "--auto-relations"]
    assert main(cli) == 2
    assert "--allow-partial-outputs grad" in " ".join(capsys.readouterr().out.split())
    assert main(cli + ["--allow-partial-outputs"]) == 0
    assert "verified up to a reduction the graph does not contain: grad" in " ".join(capsys.readouterr().out.split())


def _rank(reduce: bool):
    """The `_graph` ranks in PyTorch on a gloo group: x Shard(1), w Shard(0)."""
    def program(rank, world):
        import torch
        import torch.distributed as dist
        x, w = (torch.tensor(a) for a in _XW)
        out = x[:, 3 * rank:3 * rank + 3] @ w[3 * rank:3 * rank + 3] * 2.0
        if reduce:
            dist.all_reduce(out)
        return out.numpy()
    return program


_XW = (np.random.default_rng(3).standard_normal((8, 6)), np.random.default_rng(4).standard_normal((6, 4)))


def test_the_pairs_are_labelled_by_pytorch_on_gloo():
    from gloo import run_fn_on_gloo
    whole = _XW[0] @ _XW[1] * 2.0
    partial, reduced = run_fn_on_gloo(_rank(False), 2), run_fn_on_gloo(_rank(True), 2)
    assert all(np.allclose(r, whole) for r in reduced)
    assert not any(np.allclose(r, whole) for r in partial) and np.allclose(sum(partial), whole)
