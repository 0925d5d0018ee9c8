"""Issue 16, a dp rank class proved once with the member's batch block as a parameter
(engine/parametric.py): a class member whose inputs are the representative's with the batch rows
permuted takes every relation the permutation's action on terms determines from another member's,
without running a rule; the rest is interpreted per member as before. The dp all_reduce sums every
member's actual block, so a bug on one dp rank, or a rank loading another's chunk, is still found.
Labels: the programs are tests/test_class_proof.py's and tests/test_symmetry.py's, each run there on a
real gloo process group against the single-device step (slow)."""
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import NO_CONFIRM, verify_prepared  # noqa: E402
from shardproof.engine import parametric, symbolic  # noqa: E402
from shardproof.report.terminal import parametric_text, render  # noqa: E402
from rich.console import Console  # noqa: E402
from test_class_proof import _prepared, dp8_mlp_train, dp8_mlp_train_overlapping_slices, dp8_mlp_train_rank5_scaled  # noqa: E402,E501


def _verify(p, on=True, **kwargs):
    saved = parametric.PARAMETRIC
    parametric.PARAMETRIC = on
    try:
        return verify_prepared(p, fixes=False, **kwargs)
    finally:
        parametric.PARAMETRIC = saved


def _param(report) -> dict:
    return report.stats["class_proof"].get("parametric") or {"ranks": [], "derived_by_rank": []}


@pytest.fixture(scope="module")
def dp8():
    p = _prepared(dp8_mlp_train)
    return p, _verify(p)


@pytest.fixture(scope="module")
def reads_rank3():
    p = _prepared(dp8_mlp_train_overlapping_slices)
    return p, _verify(p, confirm_draws=NO_CONFIRM), _verify(p, on=False, confirm_draws=NO_CONFIRM)


def test_dp8_verified_with_members_proved_parametrically(dp8):
    p, report = dp8
    assert report.status == "verified", report
    param = _param(report)
    assert [(r["rank"], r["representative"], r["block"]) for r in param["ranks"]] == [(r, 0, r) for r in range(1, 8)]
    derived, interpreted = param["derived_by_rank"], report.stats["class_proof"]["interpreted_by_rank"]
    assert derived[0] == 0 and all(d > 0 for d in derived[1:])
    # a member interprets only what no other member had reached, or what the action does not cover
    assert all(i < interpreted[0] / 2 for i in interpreted[1:]), interpreted
    assert parametric_text(report) == "proved with the batch block as a parameter: ranks 1-7"
    console = Console(record=True, width=200)
    render(report, console)
    assert "proved with the batch block as a parameter: ranks 1-7" in console.export_text()


def test_same_verdict_and_fewer_rules_than_per_member(dp8):
    p, report = dp8
    before = _verify(p, on=False, confirm_draws=NO_CONFIRM)
    assert before.status == "unknown" and before.reason.startswith("proved, but not confirmed")
    assert "parametric" not in before.stats["class_proof"]
    assert report.stats["class_proof"]["interpreted"] < before.stats["class_proof"]["interpreted"] * 0.7


def test_derived_relations_are_the_ones_the_rules_give(dp8):
    """On one term store: every relation a member took from another member is the one its own
    rules build (interpreting it per member), or one the rules did not reach."""
    p, _ = dp8
    from shardproof.engine import verify as engine_verify
    seen = {}
    original = engine_verify.interpret

    def capture(seq, dist, seq_in, dist_in, terms):
        seen["args"] = (seq, dist, seq_in, dist_in, terms)
        return original(seq, dist, seq_in, dist_in, terms)
    engine_verify.interpret = capture
    try:
        _verify(p, on=False, confirm_draws=NO_CONFIRM)
    finally:
        engine_verify.interpret = original
    seq, dist, seq_in, dist_in, terms = seen["args"]
    saved = parametric.PARAMETRIC
    try:
        parametric.PARAMETRIC = False
        per_member = symbolic.interpret(seq, dist, seq_in, dist_in, terms)
        parametric.PARAMETRIC = True
        by_param = symbolic.interpret(seq, dist, seq_in, dist_in, terms)
    finally:
        parametric.PARAMETRIC = saved
    compared = 0
    for rank in range(1, dist.world_size):
        mine = {n.name: v for n, v in by_param.dist[rank].items()}
        for node, value in per_member.dist[rank].items():
            if hasattr(value, "key") and hasattr(mine.get(node.name), "key"):
                assert mine[node.name].key() == value.key(), (rank, node.name)
                compared += 1
    assert compared > 1000


def test_rank_specific_constant_on_one_rank_is_found_there():
    p = _prepared(dp8_mlp_train_rank5_scaled)
    report = _verify(p, confirm_draws=NO_CONFIRM)
    assert report.status == "violation", report
    finding = report.findings[0]
    assert finding.rank == [5] and finding.op == "aten.mul", finding
    assert [r["rank"] for r in _param(report)["ranks"]] == [1, 2, 3, 4, 6, 7]  # rank 5: a class of its own


def test_a_rank_loading_another_ranks_chunk_is_a_violation(reads_rank3):
    """Rank 4 holds rank 3's block: it is a re-indexing of the representative (block 3, said so),
    but the members' blocks are no permutation of the batch, and the dp all_reduce's sum is not the
    full batch's: a violation, found where the proof without the parameter finds it. (Labels on gloo:
    tests/test_class_proof.py test_labels_on_gloo.)"""
    _, report, before = reads_rank3
    assert report.status == "violation" and before.status == "violation", (report, before)
    blocks = {r["rank"]: r["block"] for r in _param(report)["ranks"]}
    assert blocks[4] == 3 and blocks[3] == 3 and sorted(blocks.values()) != list(range(1, 8))
    first, base = report.findings[0], before.findings[0]
    assert (first.node, first.op, first.rank, first.kind) == (base.node, base.op, base.rank, base.kind)


def test_inputs_that_are_no_permutation_are_proved_per_member():
    """Two rows of the representative onto one row of a member: no permutation, no parameter."""
    import numpy as np
    from shardproof.algebra.layout import Val
    from shardproof.algebra.terms import TermStore
    from shardproof.ir.graph import DistributedProgram

    class FakeNode:
        def __init__(self, name):
            self.name, self.op = name, "input"

    terms = TermStore()
    x = terms.make("input", ("x",), (), (4, 3))
    dist = DistributedProgram.__new__(DistributedProgram)
    dist.classes = [{"representative": 0, "ranks": [0, 1], "derived": True}]
    dist.graphs = [type("G", (), {"nodes": []})(), type("G", (), {"nodes": []})()]
    prm = parametric.Parametric(dist, terms)
    n0, n1 = FakeNode("x"), FakeNode("x")
    prm.see(0, {n0: Val(x, (np.array([0, 1]), None))})
    prm.names[0] = {"x": n0}
    prm.see(1, {n1: Val(x, (np.array([2, 2]), None))})
    assert prm.source(1, "y") is None and prm.member[1] is None
    prm2 = parametric.Parametric(dist, terms)
    prm2.see(0, {n0: Val(x, (np.array([0, 1]), None))})
    prm2.names[0] = {"x": n0}
    prm2.see(1, {n1: Val(x, (np.array([2, 3]), None))})
    prm2.source(1, "y")
    assert prm2.member[1] is not None and prm2.block[1] == 1


def test_a_derivation_checks_every_operand(dp8):
    """A node's operands are read once per member (the re-indexing check): kept as a
    tuple, never a spent generator, so a member never derives a node whose operands are not the
    source member's re-indexed (an all_to_all's result over other rows, say)."""
    from shardproof.engine.classes import ClassProof
    p, _ = dp8
    proof = ClassProof.__new__(ClassProof)
    proof.signatures = {}
    node = next(n for n in p.dist.graphs[1].nodes if n.op == "aten.mm")
    first, again = proof._inputs(node), proof._inputs(node)
    assert first is again and list(again) == list(node.inputs) and len(again) == 2
