"""A verified is confirmed by execution before it is printed: the programs run for real on
a local gloo group (one process per rank) on the case's own values and fresh draws, and
their values are compared under the proved output relations. A proof the execution
contradicts (here: a deliberately broken rule) is an internal inconsistency, unknown."""
import copy
import json
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

sys.path.insert(0, os.path.dirname(__file__))
from gloo import run_fn_on_gloo  # noqa: E402

from shardproof import Case  # noqa: E402
from shardproof.api import NO_CONFIRM, prepare, verify_case, verify_prepared  # noqa: E402
from shardproof.engine import confirm as confirm_mod  # noqa: E402
from shardproof.ops import registry  # noqa: E402

WORLD = 2
X = torch.arange(32, dtype=torch.float32).reshape(8, 4) / 7 - 2


def _scale_case(factor: int) -> Case:
    """Single device: ``3 * x``; rank r: ``factor * x[r-th block]`` (Shard(0) in and out)."""
    return Case(lambda x: x * 3, lambda rank, world: (lambda x: x * factor), {"x": X.clone()}, world_size=WORLD,
                dist_inputs=lambda r, w, inp: {"x": inp["x"].chunk(w)[r]}, expect={"out": "Shard(0)"},
                name=f"scale by {factor}")


def _gloo_label(factor: int) -> bool:
    """Whether the distributed program equals the single-device one, as gloo computes it."""
    case = _scale_case(factor)

    def rank_out(rank, world):
        import torch.distributed as dist
        local = case.distributed(rank, world)(**case.dist_inputs(rank, world, case.inputs))
        pieces = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(pieces, local)
        return torch.cat(pieces).numpy()
    whole = case.single(**case.inputs).numpy()
    return all(np.allclose(o, whole) for o in run_fn_on_gloo(rank_out, WORLD))


@pytest.fixture
def mul_ignores_constants(monkeypatch):
    """A deliberately broken rule (test-only): ``x * c`` is claimed to be ``x`` for any constant c."""
    opdef = registry.lookup("aten.mul")
    broken = copy.copy(opdef)

    def rule(ctx, a, b):
        if not (hasattr(a, "vecs") and hasattr(b, "vecs")):
            return a if hasattr(a, "vecs") else b
        return opdef.rule(ctx, a, b)
    broken.rule = rule
    monkeypatch.setitem(registry.REGISTRY, "aten.mul", broken)


def test_labels_by_gloo():
    assert _gloo_label(3) and not _gloo_label(2)


def test_correct_program_is_confirmed_on_three_draws():
    report = verify_case(_scale_case(3))
    assert report.status == "verified" and report.strength == "proof"
    c = report.confirmation
    assert (c.by, c.outcome, c.draws) == ("gloo", "confirmed", 3), c
    assert report.to_json()["confirmation"]["outcome"] == "confirmed"


def test_broken_rule_is_caught_as_internal_inconsistency(mul_ignores_constants):
    buggy = _scale_case(2)
    p = prepare(buggy, WORLD)
    report = verify_prepared(p, confirm_draws=NO_CONFIRM)
    assert report.confirmation.outcome == "skipped" and "proved" in report.reason  # the broken rule proves it
    report = verify_prepared(p)
    assert report.status == "unknown"
    assert report.confirmation.outcome == "contradicted"
    assert report.reason.startswith("internal inconsistency")
    assert "output out" in report.reason and "report it" in report.reason
    correct = verify_case(_scale_case(3))  # the twin stays verified: the broken rule is not used wrongly there
    assert correct.status == "verified" and correct.confirmation.outcome == "confirmed"


def test_no_confirm_is_never_verified():
    report = verify_case(_scale_case(3), confirm_draws=NO_CONFIRM)
    assert report.status == "unknown" and report.exit_code == 2
    assert report.reason.startswith("proved, but not confirmed by execution")


def test_too_large_to_execute_names_the_tensor(monkeypatch):
    monkeypatch.setattr(confirm_mod, "MAX_ELEMENTS", 8)
    report = verify_case(_scale_case(3))
    assert report.status == "unknown" and report.confirmation.outcome == "skipped"
    assert "too large to execute here" in report.reason and "32 elements" in report.reason


class _Linear(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight)

    def forward(self, x):
        return x @ self.weight.t()


def _column_parallel(copy_weights: bool) -> Case:
    single = _Linear(torch.randn(6, 4))
    frozen = single.weight.detach().clone() if copy_weights else None

    def distributed(rank, world):
        w = frozen if copy_weights else single.weight.detach()
        return _Linear(w.chunk(world)[rank].clone())
    return Case(single, distributed, {"x": torch.randn(3, 4)}, world_size=WORLD, expect={"out": "Shard(1)"})


def test_draws_follow_the_redrawn_weights():
    report = verify_case(_column_parallel(copy_weights=False))
    assert report.status == "verified" and report.confirmation.draws == 3, report.confirmation


def test_ranks_built_from_a_copy_count_only_the_own_values():
    report = verify_case(_column_parallel(copy_weights=True))
    c = report.confirmation
    assert report.status == "verified" and (c.outcome, c.draws) == ("confirmed", 1), c
    assert "weight on rank 0 is not Shard(0) of weight" in c.detail


def test_training_step_is_confirmed():
    import tp_mlp_train
    report = verify_case(tp_mlp_train.case(WORLD), WORLD)
    assert report.status == "verified"
    assert (report.confirmation.by, report.confirmation.outcome, report.confirmation.draws) == ("gloo", "confirmed", 3)


def test_cli_reports_the_confirmation(tmp_path, capsys):
    from shardproof.cli import main
    from conftest import ZOO
    out = tmp_path / "r.json"
    html = tmp_path / "r.html"
    assert main(["verify", os.path.join(ZOO, "tp_mlp.py"), "--confirm-draws", "1", "--json", str(out),
                 "--html", str(html)]) == 0
    assert "confirmed: gloo, 2 draws" in capsys.readouterr().out
    assert json.loads(out.read_text())["confirmation"]["draws"] == 2
    assert "confirmed: gloo, 2 draws" in html.read_text()
    assert main(["verify", os.path.join(ZOO, "tp_mlp.py"), "--no-confirm"]) == 2
    assert "proved, but not confirmed" in capsys.readouterr().out


def _dump(rows: int) -> str:
    return ('class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[%d, 16]", w: "f32[16, 4]"):\n'
            '        h: "f32[%d, 16]" = torch.ops.aten.relu.default(x);  x = None\n'
            '        mm: "f32[%d, 4]" = torch.ops.aten.mm.default(h, w);  h = w = None\n'
            '        return (mm,)\n') % (rows, rows, rows)


def test_dumps_are_executed_with_torch_or_honestly_unconfirmed(tmp_path):
    from shardproof.api import verify_dumps
    for folder, rows, ranks in (("tp1", 8, 1), ("tp2", 4, 2)):
        (tmp_path / folder).mkdir()
        for r in range(ranks):
            (tmp_path / folder / f"fw.g0.r{r}.py").write_text(_dump(rows))
    report = verify_dumps(tmp_path / "tp1", tmp_path / "tp2", auto_relations=True)
    c = report.confirmation
    try:
        import shardproof.frontends.torch_exec  # noqa: F401
    except ImportError:  # this installation does not execute graphs: proved, but never verified
        assert report.status == "unknown" and c.outcome == "skipped" and c.by == "torch"
        assert report.reason.startswith("proved, but not confirmed by execution")
    else:
        assert report.status == "verified" and (c.by, c.outcome) == ("torch", "confirmed"), c


def test_jax_case_is_confirmed_by_jax():
    from shardproof.frontends.jax_lower import host_devices
    host_devices(8)
    jax = pytest.importorskip("jax", reason="jax is not installed")
    if len(jax.devices("cpu")) < WORLD:
        pytest.skip("jax was imported with too few host devices before this test")
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "jax")
    sys.path.insert(0, root)
    from jax_models import tp_mlp_case
    report = verify_case(tp_mlp_case(WORLD), WORLD)
    c = report.confirmation
    assert report.status == "verified" and (c.by, c.outcome, c.draws) == ("jax", "confirmed", 3), c
