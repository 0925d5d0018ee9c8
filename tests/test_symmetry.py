"""Issue 16, symmetry over dp ranks and microbatches (frontends/rank_classes.py): a training
case's ranks are grouped by their eager op record (groups abstracted), one rank per class is
traced and the others' graphs derived from it. A rank whose program differs -- even only by a
scalar -- is its own class, so a bug on one dp rank is still found on that rank; a bug in the
last microbatch only is found and named by its microbatch. Labels: tests/gloo.py runs each
program on a real gloo process group against the single-device step (slow)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof import api  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402
from shardproof.frontends import rank_classes, torch_train  # noqa: E402
from shardproof.report.terminal import rank_classes_text, render  # noqa: E402
from rich.console import Console  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases", "symmetry")
sys.path.insert(0, HERE)

import dp8_mlp_train  # noqa: E402
import dp8_mlp_train_rank5_scaled  # noqa: E402
import mb4_mlp_train  # noqa: E402
import mb4_mlp_train_last_doubled  # noqa: E402
import mb4_mlp_train_last_not_accumulated  # noqa: E402
import mb4_mlp_train_rank1_wrong_group  # noqa: E402


def _run(module, symmetry=True, verify=True):
    """(prepared, report, ranks traced with make_fx) of the module's case, no fix search
    (report None without `verify`)."""
    traced = []
    original = torch_train.capture_rank_step

    def counting(make_program, rank, *args, **kwargs):
        traced.append(rank)
        return original(make_program, rank, *args, **kwargs)
    saved = api.SYMMETRY
    torch_train.capture_rank_step, api.SYMMETRY = counting, symmetry
    try:
        case = module.case()
        p = prepare(case, case.world_size)
    finally:
        torch_train.capture_rank_step, api.SYMMETRY = original, saved
    return p, verify_prepared(p, fixes=False) if verify else None, traced


@pytest.fixture(scope="module")
def dp8():
    return _run(dp8_mlp_train)


@pytest.fixture(scope="module")
def dp8_bug():
    return _run(dp8_mlp_train_rank5_scaled)


@pytest.fixture(scope="module")
def mb4():
    return _run(mb4_mlp_train, verify=False)


@pytest.fixture(scope="module")
def mb4_bug():
    return _run(mb4_mlp_train_last_doubled)


def test_dp8_one_class_one_trace_verified(dp8):
    p, report, traced = dp8
    assert report.status == "verified", report
    assert traced == [0], "one representative traced for the one class"
    assert [c["ranks"] for c in report.rank_classes] == [list(range(8))]
    assert report.rank_classes[0]["derived"] and report.rank_classes[0]["representative"] == 0
    console = Console(record=True, width=200)
    render(report, console)
    assert "rank classes: rank 0 (derived from it: 1-7)" in console.export_text()


def test_derived_graphs_are_the_traced_ones(dp8):
    """Soundness of the derivation: each derived rank's graph is the one tracing that rank
    gives (ops, arguments with its own dp group, types, inputs and their layouts, outputs)."""
    p, _, _ = dp8
    full, _, traced = _run(dp8_mlp_train, symmetry=False, verify=False)
    assert traced == list(range(8)) and not full.dist.classes

    def sig(g):
        return ([(n.name, n.op, repr(n.args), repr(n.kwargs), n.type, n.source) for n in g.nodes],
                [(n.type.strides, n.type.offset) for n in g.inputs], {k: v.name for k, v in g.outputs.items()})
    for derived, traced_graph in zip(p.dist.graphs, full.dist.graphs):
        assert sig(derived) == sig(traced_graph), derived.label
    groups = {n.args[-1] for g in p.dist.graphs for n in g.nodes if n.op == "_c10d_functional.all_reduce"}
    assert (0, 1, 2, 3, 4, 5, 6, 7) in groups


def test_bug_on_one_dp_rank_is_its_own_class_and_found_there(dp8_bug):
    _, report, traced = dp8_bug
    assert report.status == "violation", report
    classes = {c["representative"]: c["ranks"] for c in report.rank_classes}
    assert classes == {0: [0, 1, 2, 3, 4, 6, 7], 5: [5]}
    assert sorted(traced) == [0, 5]
    finding = report.findings[0]
    assert finding.rank == [5] and finding.op == "aten.mul", finding
    assert rank_classes_text(report) == "rank classes: rank 0 (derived from it: 1-4, 6-7); rank 5 (alone)"
    assert "dp8_mlp_train_rank5_scaled.py" in finding.source


def test_microbatch_classes_of_a_correct_step(mb4):
    p, _, traced = mb4
    assert traced == [0] and [c["microbatch_classes"] for c in p.dist.classes] == [[[0], [1, 2, 3]]]
    marked = {m for n, (stage, m) in p.dist.graphs[1].positions.items()}
    assert marked == {0, 1, 2, 3}, "every microbatch's nodes are marked, on derived ranks too"


def test_bug_in_the_last_microbatch_is_found_and_named(mb4_bug):
    _, report, _ = mb4_bug
    assert report.status == "violation", report
    assert [c["microbatch_classes"] for c in report.rank_classes] == [[[0], [1, 2], [3]]]
    finding = report.findings[0]
    assert finding.microbatch == 3 and "microbatch 3" in finding.message, finding
    assert finding.kind == "scaling-mismatch" and finding.rank == [0, 1], finding


def test_missing_accumulation_in_the_last_microbatch_is_located():
    """The last microbatch replaces the accumulated gradients: found after the loop (the dp
    all_reduce of the gradient), and the finding says microbatch 3 runs another program."""
    _, report, _ = _run(mb4_mlp_train_last_not_accumulated)
    assert report.status == "violation", report
    assert [c["microbatch_classes"] for c in report.rank_classes] == [[[0], [1, 2], [3]]]
    finding = report.findings[0]
    assert "microbatch 3 runs another program than microbatches 1, 2" in finding.message, finding.message


def test_a_rank_on_another_group_is_derived_with_its_own_group_and_found():
    """Rank 1 reduces over its own size-1 group: its ops are rank 0's, so one class, but its
    derived graph carries its own group and the collectives never pair up (a deadlock)."""
    p, report, traced = _run(mb4_mlp_train_rank1_wrong_group)
    assert traced == [0] and [c["ranks"] for c in report.rank_classes] == [[0, 1]]
    assert report.status == "violation", report
    finding = report.findings[0]
    assert finding.kind == "collective-mismatch" and "deadlock" in finding.message, finding
    groups = [{n.args[-1] for n in g.nodes if n.op == "_c10d_functional.all_reduce"} for g in p.dist.graphs]
    assert (1,) in groups[1] and (1,) not in groups[0]


def test_fingerprint_abstracts_only_the_groups():
    """Ranks 0 and 5 of the buggy step run the same ops with another scalar: other keys;
    ranks 0 and 1 of the correct one differ only in their data slice: one key, their own groups."""
    def fp(module, rank):
        case = module.case()
        return rank_classes.fingerprint_step(case.distributed, rank, 8, case.dist_inputs(rank, 8, case.inputs),
                                             case.train)
    a, b = fp(dp8_mlp_train_rank5_scaled, 0), fp(dp8_mlp_train_rank5_scaled, 5)
    assert a.key != b.key
    c, d = fp(dp8_mlp_train, 0), fp(dp8_mlp_train, 1)
    assert c.key == d.key and c.layouts != d.layouts and c.groups != d.groups  # (their tp groups: (0,), (1,))


# ---------------------------------------------------------------- labels (real gloo runs)

LABELLED = [("dp8_mlp_train", 8, "all"), ("dp8_mlp_train_rank5_scaled", 8, "none"),
            ("mb4_mlp_train", 2, "all"), ("mb4_mlp_train_last_doubled", 2, "none"),
            ("mb4_mlp_train_last_not_accumulated", 2, "none"), ("mb4_mlp_train_rank1_wrong_group", 2, "none")]
_GRADS: dict = {}  # world size -> {path: training_gradients}, the files of that size run by one spawn


def _hangs(name):
    return name.endswith("wrong_group")  # a gloo hang: run alone, waited for 25 s, not five minutes


def _grads_agree(path, world, timeout=300):
    """Per rank: whether its gradients equal the single-device ones (False: differ, or no result).
    The first file asked for at a world size runs every one of that size that does not hang in
    one spawn (each in a fresh gloo group); the others (and any that spawn left out) run alone."""
    from gloo import gradients_agree
    batch = [os.path.join(HERE, f"{n}.py") for n, w, _ in LABELLED if w == world and not _hangs(n)]
    return gradients_agree(path, world, batch, _GRADS, timeout)


@pytest.mark.slow
@pytest.mark.parametrize("name,world,want", LABELLED)
def test_labels_on_gloo(name, world, want):
    """Correct programs' gradients equal the single-device ones on every rank; the buggy ones'
    differ (after the dp all_reduce, on every rank) or never come (a hang; no result counts as differing)."""
    agree = _grads_agree(os.path.join(HERE, f"{name}.py"), world, timeout=25 if _hangs(name) else 300)
    assert agree == ([True] * world if want == "all" else [False] * world), agree


@pytest.mark.slow
def test_cli_no_symmetry_traces_every_rank(tmp_path):
    """--no-symmetry: every rank traced (no classes in the report), for that run only."""
    import json
    from shardproof.cli import main
    out = tmp_path / "off.json"
    assert main(["verify", os.path.join(HERE, "mb4_mlp_train.py"), "--no-confirm", "--no-fix", "-qq", "--no-symmetry",
                 "--json", str(out)]) == 2
    assert json.loads(out.read_text())["rank_classes"] == []
    assert api.SYMMETRY is True
