"""Issue 16, microbatches flat in M (frontends/microbatches.py): a rank's gradient-accumulation
loop is traced with the fewest microbatches holding each distinct microbatch program once
(the first ones, the generic body, an odd last one), and the full loop's graph is derived by
repeating the generic body -- only where the eager records of the full and the reduced loop
agree segment by segment and the generic microbatches read their own slice of the batch.
A microbatch whose program differs is traced as itself and a finding in it names it.
Labels: each program run on a real gloo process group against the single-device step (slow)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import NO_CONFIRM, prepare, verify_prepared  # noqa: E402
from shardproof.frontends import microbatches, torch_train  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases", "microbatch")
sys.path.insert(0, HERE)

import mb8_mlp_train  # noqa: E402
import mb8_mlp_train_acc_doubled  # noqa: E402
import mb8_mlp_train_count_scaled  # noqa: E402
import mb8_mlp_train_divided_by_count  # noqa: E402
import mb8_mlp_train_first_slice  # noqa: E402
import mb8_mlp_train_last_doubled  # noqa: E402
import mb8_mlp_train_last_not_accumulated  # noqa: E402
import mb8_mlp_train_middle_doubled  # noqa: E402
import mb8_mlp_train_rank1_last_doubled  # noqa: E402
import mb8_mlp_train_rank1_slice_repeated  # noqa: E402
import mb8_mlp_train_row_ids_clamped  # noqa: E402
import mb8_mlp_train_same_row_ids  # noqa: E402


def _run(module, confirm=False):
    """(prepared, report, microbatch counts of the traces made), no fix search; confirmed by
    execution only with `confirm` (a finding is the engine's own)."""
    traced = []
    original = torch_train.capture_rank_step

    def counting(make_program, rank, world, data, train, *args, **kwargs):
        traced.append(train.microbatches)
        return original(make_program, rank, world, data, train, *args, **kwargs)
    torch_train.capture_rank_step = counting
    try:
        case = module.case()
        p = prepare(case, case.world_size)
    finally:
        torch_train.capture_rank_step = original
    return p, verify_prepared(p, fixes=False, confirm_draws=None if confirm else NO_CONFIRM), traced


def _loop(report):
    assert len(report.rank_classes) == 1, report.rank_classes
    return report.rank_classes[0].get("microbatch_loop")


@pytest.fixture(scope="module")
def correct():
    return _run(mb8_mlp_train, confirm=True)


def test_plan():
    a, b, c, d = "abcd"
    assert microbatches.plan([a, b, c, c, c, c, c, c]) == (2, False)
    assert microbatches.plan([a, b, c, c, c, c, c, d]) == (2, True)
    assert microbatches.plan([a, b, c, d, b, c, c, c]) == (5, False), "an odd middle microbatch is traced"
    assert microbatches.plan([a, b, c, d]) is None, "nothing left to derive"
    assert microbatches.plan([a, b, c, c]) is None, "one microbatch derived costs more than traced"
    assert microbatches.plan([a, a]) is None


def test_correct_step_traced_reduced_and_verified(correct):
    p, report, traced = correct
    assert report.status == "verified", report
    assert traced == [3], "one trace, of 3 microbatches (first, second, generic)"
    assert _loop(report) == {"microbatches": 8, "traced": [0, 1, 2], "generic": 2, "derived": [3, 4, 5, 6, 7]}
    from shardproof.report.terminal import rank_classes_text
    assert rank_classes_text(report).endswith("(microbatches 3-7 derived from 2); proof: microbatches 4-7 by "
                                              "induction from 1-3"), rank_classes_text(report)
    marked = {m for _, m in p.dist.graphs[1].positions.values()}
    assert marked == set(range(8)), "every microbatch's nodes are marked, on the derived rank too"
    # the proof: microbatches 1, 2, 3 interpreted (one affine step checked twice), 4-7 concluded (engine/induction.py)
    assert report.stats["microbatch_induction"] == {"microbatches": 8, "checked": [1, 2, 3], "by_induction": [4, 5, 6, 7]}


def test_derived_loop_is_the_traced_one(correct):
    """Soundness of the derivation: the derived graph is the one tracing all 8 microbatches
    gives (node names, ops, arguments, types with layouts, sources, positions, outputs)."""
    p, _, _ = correct
    case = mb8_mlp_train.case()
    data = case.dist_inputs(0, 2, case.inputs)
    whole, _ = torch_train.capture_rank_step(case.distributed, 0, 2, data, case.train)

    def sig(g):  # (the step's output detaches are attributed to the caller's line: not compared)
        return ([(n.name, n.op, repr(n.args), repr(n.kwargs), n.type, n.source if n.op != "aten.detach" else None)
                 for n in g.nodes], [(n.type.strides, n.type.offset) for n in g.inputs],
                {k: v.name for k, v in g.outputs.items()}, g.positions)
    assert sig(p.dist.graphs[0]) == sig(whole)


def test_concluded_state_is_the_interpreted_one(correct):
    """Soundness of the induction on this loop: the state it concludes after the last generic
    microbatch (every value a later op reads) is, term and layout, the one interpreting all 8
    microbatches builds (one term store: equal terms are one id)."""
    from shardproof.algebra.terms import TermStore
    from shardproof.engine import induction
    from shardproof.engine.symbolic import interpret
    from shardproof.engine.verify import _input_vals
    p, _, _ = correct
    terms = TermStore()
    seq_in, dist_in = _input_vals(terms, p.seq, p.dist, p.bindings)
    run, record = induction.interpret_by_induction(p.seq, p.dist, seq_in, dist_in, terms, interpret)
    assert "fallback" not in record and not run.unsupported, record
    whole = interpret(p.seq, p.dist, seq_in, dist_in, terms)

    def key(v):
        return tuple(key(x) for x in v) if isinstance(v, (tuple, list)) else (v.key() if hasattr(v, "key") else v)
    for r, g in enumerate(p.dist.graphs):
        concluded = [n for n in g.nodes if g.positions.get(n.name) == (None, 7) and n in run.dist[r]]
        assert len(concluded) >= 5, "the accumulated gradients and loss are concluded"
        assert not any(g.positions.get(n.name) == (None, 6) for n in run.dist[r]), "microbatch 6 not interpreted"
        assert [key(run.dist[r][n]) for n in concluded] == [key(whole.dist[r][n]) for n in concluded]


def test_affine_step():
    """The step the induction extrapolates: a translation by one difference, or an extension
    by a block translated by one difference; anything else does not fit."""
    import numpy as np
    from shardproof.engine.induction import Unfit, _progression, steady
    a = np.array
    assert list(_progression(a([0, 1]), a([2, 3]), a([4, 5]), 2)) == [8, 9]
    assert list(_progression(a([0, 1]), a([0, 1, 2, 3]), a([0, 1, 2, 3, 4, 5]), 1)) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert list(_progression(a([0, 5]), a([1, 5]), a([2, 5]), 1)) == [3, 5], "a position that stays"
    for x, y, z in [([0, 1], [2, 3], [5, 6]), ([0], [0, 1], [0, 1, 3, 4]), ([0, 1], [0, 1, 2, 3], [0, 1, 2, 3, 5, 4]),
                    ([0, 1], [2, 4], [4, 7]), ([0, 1], [1, 2, 3], [2, 3, 4, 5])]:
        with pytest.raises(Unfit):
            _progression(a(x), a(y), a(z), 1)
    from shardproof.algebra.layout import Val
    assert steady([Val(1, (a([k, k + 1]), None)) for k in (0, 2, 4, 6)])
    assert not steady([Val(1, (a([k, k + 1]), None)) for k in (0, 2, 4, 7)])
    assert not steady([Val(1, (a([0, 1]), None)), Val(2, (a([2, 3]), None)), Val(1, (a([4, 5]), None))])


@pytest.mark.parametrize("module,kind", [(mb8_mlp_train_acc_doubled, "scaling-mismatch"),
                                         (mb8_mlp_train_first_slice, "missing-gradient-reduction")])
def test_uniform_bugs_do_not_fit_the_induction(module, kind):
    """Bugs every generic microbatch runs alike (the loop is derived: one program): the
    accumulator doubled before each add, every microbatch on the first slice. The states are
    not one affine step apart, so every microbatch is interpreted and the bug is found."""
    _, report, traced = _run(module)
    assert report.status == "violation", report
    assert traced == [3] and _loop(report)["derived"] == [3, 4, 5, 6, 7], "one program: the loop was derived"
    induced = report.stats["microbatch_induction"]
    assert induced["by_induction"] == [] and "not one affine step apart" in induced["fallback"], induced
    assert report.findings[0].kind == kind, report.findings[0]


def test_a_wrong_loss_scale_in_every_microbatch_fails_at_the_end_of_the_induction():
    """Every microbatch's loss divided by M on top of the token-count normalisation: one program
    (the step fits the induction), but the gradient accumulated over the loop is 1/M of the
    single-device one -- the end of the induction is not proved, and the bug is found."""
    _, report, traced = _run(mb8_mlp_train_divided_by_count)
    assert report.status == "violation", report
    assert report.stats["microbatch_induction"] == {
        "microbatches": 8, "checked": [1, 2, 3], "by_induction": [],
        "fallback": "the outputs are not proved from the concluded state"}, "the step fitted; the end did not"
    assert report.findings[0].kind == "scaling-mismatch", report.findings[0]


def test_bug_in_the_last_microbatch_only_is_found_there():
    _, report, traced = _run(mb8_mlp_train_last_doubled)
    assert report.status == "violation", report
    assert report.stats["microbatch_induction"]["by_induction"] == [], "found by interpreting every microbatch"
    assert traced == [4] and _loop(report)["traced"] == [0, 1, 2, 7], "the odd last microbatch traced as itself"
    assert _loop(report)["derived"] == [3, 4, 5, 6]
    finding = report.findings[0]
    assert finding.microbatch == 7 and "microbatch 7" in finding.message, finding
    assert finding.kind == "scaling-mismatch" and finding.rank == [0, 1], finding


def test_bug_in_a_middle_microbatch_is_found_there():
    _, report, traced = _run(mb8_mlp_train_middle_doubled)
    assert report.status == "violation", report
    # microbatch 4 reads microbatch 3's (odd) accumulator: it too is traced as itself
    assert traced == [6] and _loop(report) == {"microbatches": 8, "traced": [0, 1, 2, 3, 4, 5], "generic": 5,
                                               "derived": [6, 7]}
    finding = report.findings[0]
    assert finding.microbatch == 3 and "microbatch 3" in finding.message, finding


def test_missing_accumulation_in_the_last_microbatch_is_found():
    _, report, _ = _run(mb8_mlp_train_last_not_accumulated)
    assert report.status == "violation", report
    assert _loop(report)["traced"] == [0, 1, 2, 7]
    assert "microbatch 7 runs another program" in report.findings[0].message, report.findings[0].message


def test_each_class_derives_its_loop_from_its_own_fingerprint_run(monkeypatch):
    """The full loop's eager record is the rank's fingerprint run (one eager run per rank, plus
    one reduced run per class): a bug on dp rank 1's last microbatch only makes rank 1 its
    own class, whose loop is derived from its own record (the odd last traced) and the
    finding names rank 1 and microbatch 7; rank 0's loop is the correct one's."""
    counts = []
    original = microbatches.MicrobatchRecord.__init__

    def counting(self, inputs, count):
        counts.append(count)
        original(self, inputs, count)
    monkeypatch.setattr(microbatches.MicrobatchRecord, "__init__", counting)
    _, report, traced = _run(mb8_mlp_train_rank1_last_doubled)
    assert sorted(counts) == [3, 4, 8, 8], "two fingerprint runs (8 microbatches), one reduced run per class"
    loops = {c["representative"]: c["microbatch_loop"] for c in report.rank_classes}
    assert [c["ranks"] for c in report.rank_classes] == [[0], [1]]
    assert loops[0]["traced"] == [0, 1, 2] and loops[1]["traced"] == [0, 1, 2, 7], loops
    assert sorted(traced) == [3, 4]
    assert report.status == "violation", report
    finding = report.findings[0]
    assert finding.rank == [1] and finding.microbatch == 7 and "microbatch 7" in finding.message, finding


def test_a_rank_reading_another_microbatchs_slice_is_its_own_class():
    """Adversarial, aimed at the fingerprint computed from the loop's segment-relative record
    (one walk per op): dp rank 1's microbatch 5 reads microbatch 4's slice of the batch (split
    before the loop), rank 0 its own. The two records differ only in that slice's index, so
    rank 1 is its own class, its loop is traced whole (microbatch 5 is another program), the
    induction does not fit it (the slices do not move by one step), and the bug is found on
    rank 1 in microbatch 5 (gloo label: buggy, `test_labels_on_gloo`)."""
    _, report, traced = _run(mb8_mlp_train_rank1_slice_repeated)
    assert [c["ranks"] for c in report.rank_classes] == [[0], [1]]
    loops = {c["representative"]: c.get("microbatch_loop") for c in report.rank_classes}
    assert loops[0]["traced"] == [0, 1, 2] and loops[1] is None, loops
    assert sorted(traced) == [3, 8]
    assert report.status == "violation", report
    finding = report.findings[0]
    assert finding.rank == [1] and finding.microbatch == 5 and "microbatch 5" in finding.message, finding
    assert not report.stats["microbatch_induction"]["by_induction"]


def test_a_constant_of_the_microbatch_count_is_not_derived():
    """Scaled by 8 / train.microbatches: the reduced run is another program, so the loop is
    traced whole (8 microbatches), and the step still verifies -- by induction over the loop
    traced whole (microbatches 1-7 record one program; the scale is in every microbatch's
    terms and the end of the loop is checked against the single-device gradient)."""
    _, report, traced = _run(mb8_mlp_train_count_scaled)
    assert traced == [8] and _loop(report) is None
    assert report.status == "unknown" and report.reason.startswith("proved, but not confirmed"), report
    assert report.stats["microbatch_induction"] == {"microbatches": 8, "checked": [1, 2, 3], "by_induction": [4, 5, 6, 7]}


def test_rows_treated_alike_by_value_is_a_precondition():
    """Row ids built before the loop, sliced there one per microbatch, each microbatch's
    tokens weighted by a function of its ids (a table the single-device loss builds too,
    related by value: engine/tables.py). Clamped at row 5 (microbatches 6-7 weigh as row 5:
    a bug), the three checked microbatches still look like every other -- without the
    precondition the induction concluded the clamped rows as unclamped and proved the step.
    Now the slices' values must be equal in every generic microbatch, or every microbatch is
    interpreted: the bug is found. Every row's id 3 on both sides (slices equal by value): the
    precondition holds and the step is proved by induction."""
    _, report, _ = _run(mb8_mlp_train_row_ids_clamped)
    assert report.status == "violation", report
    induced = report.stats["microbatch_induction"]
    assert induced["by_induction"] == [] and "differs by value" in induced["fallback"], induced
    _, report, _ = _run(mb8_mlp_train_same_row_ids)
    assert report.status == "unknown" and report.reason.startswith("proved, but not confirmed"), report
    assert report.stats["microbatch_induction"]["by_induction"] == [4, 5, 6, 7], report.stats


@pytest.mark.slow
@pytest.mark.parametrize("name,bug", [
    ("mb8_mlp_train_single_row_mask", True), ("mb8_mlp_train_single_cat_scaled", True),
    ("mb8_mlp_train_parallel_row_mask", True), ("mb8_mlp_train_both_row_mask", False),
    ("mb8_mlp_train_row_ids", False), ("mb8_mlp_train_parallel_cat_scaled", True)])
def test_batch_non_uniform_programs(name, bug):
    """Rows from 6 on (microbatches 6-7, after the three checked) treated otherwise: by the
    single-device loss (a row mask from arange; a cat with the last rows scaled), by the
    parallel loop (a row mask built before it, split with the batch; its rows scaled before
    it: the slices are not one term), or by both alike; rows
    weighted by their ids on both sides. Never proved by induction; the buggy ones are
    violations, the correct ones are not (row ids: proved by interpreting every microbatch)."""
    import importlib
    _, report, _ = _run(importlib.import_module(name))
    assert report.stats["microbatch_induction"]["by_induction"] == [], report.stats["microbatch_induction"]
    assert (report.status == "violation") == bug, report
    if name == "mb8_mlp_train_row_ids":
        assert report.reason.startswith("proved, but not confirmed"), report


# ---------------------------------------------------------------- labels (real gloo runs)

_GRADS: dict = {}  # world size -> {path: training_gradients}, every labelled file run by one spawn
LABELLED = [
    ("mb8_mlp_train", True), ("mb8_mlp_train_count_scaled", True), ("mb8_mlp_train_last_doubled", False),
    ("mb8_mlp_train_middle_doubled", False), ("mb8_mlp_train_last_not_accumulated", False),
    ("mb8_mlp_train_acc_doubled", False), ("mb8_mlp_train_first_slice", False),
    ("mb8_mlp_train_divided_by_count", False), ("mb8_mlp_train_row_ids", True),
    ("mb8_mlp_train_row_ids_clamped", False), ("mb8_mlp_train_single_row_mask", False),
    ("mb8_mlp_train_single_cat_scaled", False), ("mb8_mlp_train_parallel_row_mask", False),
    ("mb8_mlp_train_both_row_mask", True), ("mb8_mlp_train_same_row_ids", True),
    ("mb8_mlp_train_parallel_cat_scaled", False), ("mb8_mlp_train_rank1_last_doubled", False),
    ("mb8_mlp_train_rank1_slice_repeated", False)]


@pytest.mark.slow
@pytest.mark.parametrize("name,want", LABELLED)
def test_labels_on_gloo(name, want):
    """Correct programs' gradients equal the single-device ones on every rank; the buggy
    ones' differ on every rank (after the dp all_reduce). The first label asked for runs every
    file's ranks in one spawn (each file in a fresh gloo group; one it left out runs alone)."""
    from gloo import gradients_agree
    agree = gradients_agree(os.path.join(HERE, f"{name}.py"), 2, [os.path.join(HERE, f"{n}.py") for n, _ in LABELLED],
                            _GRADS)
    assert agree == [want, want], agree
