"""Issue 16, the proof by rank class (engine/classes.py): the members of a rank class run
one program, so a local op whose operands hold the same relations on two members is
interpreted once; a member whose program or input relation differs is interpreted on its
own. A bug on one dp rank only, and a dp rank that loads another's batch chunk, are still
found on their ranks. Labels: each program run on a real gloo group (tests/gloo.py), slow."""
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import prepare, verify_prepared  # noqa: E402
from shardproof.engine import symbolic  # noqa: E402
from shardproof.engine.lockstep import is_collective  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases", "symmetry")
sys.path.insert(0, HERE)

import dp8_mlp_train  # noqa: E402
import dp8_mlp_train_overlapping_slices  # noqa: E402
import dp8_mlp_train_rank5_scaled  # noqa: E402


def _prepared(module):
    case = module.case()
    return prepare(case, case.world_size)


def _verify(p, by_class=True):
    saved = symbolic.CLASS_PROOF
    symbolic.CLASS_PROOF = by_class
    try:
        return verify_prepared(p, fixes=False)
    finally:
        symbolic.CLASS_PROOF = saved


@pytest.fixture(scope="module")
def dp8():
    p = _prepared(dp8_mlp_train)
    return p, _verify(p)


def test_dp8_verified_with_shared_ops_interpreted_once(dp8):
    p, report = dp8
    assert report.status == "verified", report
    stats = report.stats["class_proof"]
    per_rank = stats["interpreted_by_rank"]
    nodes = [sum(not is_collective(n) for n in g.nodes) for g in p.dist.graphs]
    # every member reaches every local op; the first interprets all, the others only what the placement makes rank-specific
    assert [i + u for i, u in zip(per_rank, stats["reused_by_rank"])] == nodes
    assert all(per_rank[r] < per_rank[0] for r in range(1, 8)), per_rank
    assert stats["reused"] >= 7 * nodes[0] // 5, stats  # > ~20% of every member's ops


def test_shared_values_are_the_values_interpreting_every_rank_gives(dp8):
    """Soundness of the sharing: every rank's every tensor holds the same term and layout
    with and without the proof by class."""
    from shardproof.engine.verify import _input_vals
    from shardproof.algebra.terms import TermStore
    p, _ = dp8
    runs = []
    for by_class in (True, False):
        saved, symbolic.CLASS_PROOF = symbolic.CLASS_PROOF, by_class
        try:
            terms = TermStore()
            seq_in, dist_in = _input_vals(terms, p.seq, p.dist, p.bindings)
            runs.append((terms, symbolic.interpret(p.seq, p.dist, seq_in, dist_in, terms)))
        finally:
            symbolic.CLASS_PROOF = saved
    (ta, a), (tb, b) = runs
    assert a.classes and b.classes is None and not a.unsupported and not b.unsupported

    def key(terms, v):
        return (terms.describe(v.t, depth=99), v.key()[1]) if hasattr(v, "vecs") else repr(v)
    for r, (ea, eb) in enumerate(zip(a.dist, b.dist)):
        assert {n.name: key(ta, v) for n, v in ea.items()} == {n.name: key(tb, v) for n, v in eb.items()}, r


def test_bug_on_one_dp_rank_found_on_it():
    """Rank 5 alone scales its loss: its own class, interpreted on its own, found there."""
    p = _prepared(dp8_mlp_train_rank5_scaled)
    report = _verify(p)
    assert report.status == "violation", report
    assert report.findings[0].rank == [5] and report.findings[0].op == "aten.mul", report.findings[0]
    assert report.stats["class_proof"]["reused_by_rank"][5] == 0


def test_member_with_another_members_data_slice_found():
    """Rank 4 loads rank 3's chunk: one class (one program), but its input relation is not
    the class's placement at its coordinate, so its ops are not the class's and the dp
    all_reduce of the gradients counts chunk 3 twice: a violation, with or without classes."""
    p = _prepared(dp8_mlp_train_overlapping_slices)
    assert [c["ranks"] for c in p.dist.classes] == [list(range(8))] and p.dist.classes[0]["derived"]
    assert "4: (3, 4)" in str(p.bindings["x"].relation)  # the inferred input relation: rank 4 holds row block 3
    report = _verify(p)
    assert report.status == "violation", report
    finding = report.findings[0]  # the loss divided by the dp-all-reduced token count, which counts chunk 3 twice
    assert (finding.kind, finding.op, finding.rank) == ("wrong-normalization", "aten.div", list(range(8))), finding
    assert "microbatch_loss" in finding.source
    stats = report.stats["class_proof"]
    assert stats["reused_by_rank"][4] > stats["reused_by_rank"][5]  # rank 4's ops are rank 3's: same operands
    plain = _verify(p, by_class=False)
    assert plain.status == "violation"
    assert (plain.findings[0].node, plain.findings[0].rank) == (report.findings[0].node, report.findings[0].rank)


LABELLED = [("dp8_mlp_train", "all"), ("dp8_mlp_train_overlapping_slices", "none")]
_GRADS: dict = {}  # world size -> {path: training_gradients}, both labelled files run by one spawn


@pytest.mark.slow
@pytest.mark.parametrize("name,want", LABELLED)
def test_labels_on_gloo(name, want):
    """The correct step's gradients equal the single-device ones on every rank; with rank 4
    on chunk 3 they differ on every rank (after the dp all_reduce). (The rank-5 label is in
    tests/test_symmetry.py.)"""
    from gloo import gradients_agree  # both files' ranks from one spawn (each in a fresh gloo group)
    agree = gradients_agree(os.path.join(HERE, f"{name}.py"), 8, [os.path.join(HERE, f"{n}.py") for n, _ in LABELLED],
                            _GRADS)
    assert agree == ([True] * 8 if want == "all" else [False] * 8), agree


def test_executor_captures_one_representative_per_class():
    """On a pool of forked workers the ranks are captured one class per unit, as in this
    process: the same report (rank classes and the proof's counts included) but the timings."""
    import tp_mlp_train
    from shardproof.api import NO_CONFIRM, verify_case
    from shardproof.engine import executor as ex
    reports = {}
    for kind in ("serial", "local"):
        with ex.using(ex.make(kind, workers=2)):
            reports[kind] = verify_case(tp_mlp_train.case(4), 4, confirm_draws=NO_CONFIRM, fixes=False)
    serial, local = reports["serial"], reports["local"]
    assert [c["ranks"] for c in local.rank_classes] == [[0, 2], [1, 3]] and local.rank_classes[0]["derived"]
    assert ex.without_timings(serial.to_json()) == ex.without_timings(local.to_json())
    units = local.stats["timings"]["units"]
    assert [u["unit"] for u in units] == ["single-device", "rank 0 (class of 2 ranks)", "rank 1 (class of 2 ranks)"]
    assert all(u["worker"] != units[0]["worker"] for u in units[1:])
