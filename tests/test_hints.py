"""Every zoo bug's first finding gives a hint that is right for that bug and points at the
bug's line (issue 17): each bug file's ``meta`` states what a right hint must mention
(``hint``, a regex searched case-insensitively; ``hint_not``, one it must not match) and
which line the finding's source must be (``bug_line``, a text of that line; by default the
line's ``# BUG`` marker). The two localization examples of issue 17 are checked in full:
a view sized with the global head count is the finding (not the matmul after it), and a
missing backward all_reduce of Megatron's f carries the forward line, with a hint that says
so. Labels are facts about PyTorch: each of those two programs is run on a real gloo group
against its single-device program, and its correct twin agrees."""
import glob
import importlib
import linecache
import os
import re
import sys

import pytest

from conftest import ZOO, check_hint

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import cross_check, prepare, verify_prepared  # noqa: E402

FORWARD_BUGS = os.path.join(ZOO, "bugs")
TRAIN_BUGS = os.path.join(ZOO, "train", "bugs")
FAST_TRAIN = {"megatron_f_missing_backward_allreduce", "column_parallel_input_grad", "clip_local_norm",
              "clip_replicated_counted_per_rank", "tied_output_input_grad_not_reduced", "loss_mean_per_microbatch"}


def _params():
    out = []
    for folder in (FORWARD_BUGS, TRAIN_BUGS):
        for path in sorted(glob.glob(os.path.join(folder, "*.py"))):
            name = os.path.splitext(os.path.basename(path))[0]
            if name.startswith("_") or name == "unknown_op":
                continue
            slow = folder == TRAIN_BUGS and name not in FAST_TRAIN  # each a training step: seconds to minutes
            out.append(pytest.param(name, id=name, marks=(pytest.mark.slow, pytest.mark.sweep) if slow else ()))
    return out


def _source_line(source: str) -> str:
    file, line = source.split(" in ")[0].rsplit(":", 1)
    return linecache.getline(file, int(line)).strip()


def first_finding(name: str):
    module = importlib.import_module(name)
    world = getattr(module, "WORLD_SIZES", (2,))[0]
    case = module.case(world)
    if case.meta.get("pending"):
        pytest.skip(f"pending: needs {case.meta['pending']}")
    p = prepare(case, world)
    report = verify_prepared(p)
    assert report.status == "violation", report.reason
    return report.findings[0], case.meta, p


@pytest.mark.sweep  # make test checks every bug's hint inside test_zoo / test_training's bug tests
@pytest.mark.parametrize("name", _params())
def test_hint_is_right_for_the_bug(name):
    finding, meta, _ = first_finding(name)
    check_hint(finding, meta)


def test_wrong_head_dim_view_is_the_finding():
    """The view with the global head count is located, its sizes named against the
    single-device view's, and its counterpart is that view (the same value the rank's tensor
    is a piece of), not the q projection that the matmul after it happened to be paired with."""
    finding, meta, p = first_finding("attention_wrong_head_dim")
    assert (finding.kind, finding.op, finding.rank) == ("wrong-view-size", "aten.view", [0, 1]), finding
    seq_view = p.seq.node(finding.counterpart)
    assert seq_view.op == "aten.view" and tuple(seq_view.shape) == (2, 6, 24, 2), seq_view
    assert "[2, 6, 12, 2]" in finding.hint and "[2, 6, 24, -1]" in finding.hint, finding.hint
    assert "HEADS" in _source_line(finding.source)
    assert cross_check(p), "a violation must be backed by a numeric difference"


def test_missing_f_backward_carries_the_forward_line():
    """The partial gradient autograd sums with the residual's is located at the backward op
    that made it, on the forward line of the layer the activation enters through f -- not the
    ``autograd.grad`` call -- and the hint says to all_reduce it in the backward, not to add a
    term on one rank only."""
    finding, meta, p = first_finding("megatron_f_missing_backward_allreduce")
    assert finding.kind == "missing-gradient-reduction", finding
    assert "autograd.grad" not in _source_line(finding.source)
    assert "f goes here" in _source_line(finding.source), finding.source
    assert re.search(r"all_reduce.*backward", finding.hint) and "one rank only" not in finding.hint, finding.hint


def _gloo_label(path: str, correct_source: str, tmp_path, world: int, training: bool) -> tuple[float, float]:
    """(max difference of the bug program, of its correct twin) against the single device, on gloo."""
    from gloo import max_differences, run_case_file, run_case_files, training_gradients, training_gradients_of
    twin = tmp_path / "correct_twin.py"
    twin.write_text(correct_source)
    sys.path.insert(0, os.path.dirname(path))
    worst, paths = [], [path, str(twin)]
    both = (training_gradients_of if training else run_case_files)(paths, world)  # one spawn; alone if left out
    for p in paths:
        if training:
            single, ranks = both.get(p) or training_gradients(p, world)
            assert not any(isinstance(g, str) for g in ranks), ranks
            worst.append(max(float((g[n].double() - single[n].double()).abs().max())
                             for g in ranks for n in ("proj.weight", "proj.bias")))
        else:
            worst.append(max(max_differences(both.get(p) or run_case_file(p, world)).values()))
    return worst[0], worst[1]


def test_wrong_head_dim_label_on_gloo(tmp_path):
    bug, correct = _gloo_label(os.path.join(FORWARD_BUGS, "attention_wrong_head_dim.py"),
                               "from tp_attention import case\n", tmp_path, 2, training=False)
    assert bug > 1e-3 and correct < 1e-5, (bug, correct)


def test_missing_f_backward_label_on_gloo(tmp_path):
    bug, correct = _gloo_label(os.path.join(TRAIN_BUGS, "megatron_f_missing_backward_allreduce.py"),
                               "from megatron_f_missing_backward_allreduce import TrainParallelResidual, case as bug\n"
                               "def case(world_size=2):\n    return bug(world_size, model=TrainParallelResidual)\n",
                               tmp_path, 2, training=True)
    assert bug > 1e-3 and correct < 1e-5, (bug, correct)


def test_correct_twin_of_missing_f_backward_is_verified():
    module = importlib.import_module("megatron_f_missing_backward_allreduce")
    report = verify_prepared(prepare(module.case(2, model=module.TrainParallelResidual), 2))
    assert report.status == "verified", (report.reason, [f.message for f in report.findings])
