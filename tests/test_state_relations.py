"""Optimizer states related as their parameter is, where that is proved (issue 16: the step's
value matching sub-linear in the layers; relations/made_from.py, torch_train.state_source).
A state input ``<state>:<param>`` takes its parameter's relation only when it is exactly what
the state-making code gives for its parameter on the single device and on every rank, the
parameter's relation is a selection (not a partial sum) and the layout holds on the state's own
values; anything else is left to value matching. A step that re-initialises one layer's state
inside its tail (``state-init``) is never verified and is located at that layer's updates.
Label: the step run on a real gloo group (4 processes) against the single-device step
(tests/gloo.py training_step_agrees)."""
import os
import sys

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src", "shardproof", "zoo", "train"))

from shardproof.case import AdamW  # noqa: E402
from shardproof.frontends.torch_train import state_source, state_values  # noqa: E402
from shardproof.relations.infer import InputRelation, resolve_inputs  # noqa: E402
from shardproof.relations.made_from import HOW, by_source  # noqa: E402
from shardproof.relations.spec import Ignore, Partial, Shard  # noqa: E402

STATE_INIT = os.path.join(HERE, "cases", "step_llama_tail_state_init1.py")
OPT = AdamW(lr=1e-2)


def _values(world=2):
    """A (4, 3) weight sharded by rows over `world` ranks, with its AdamW states as the step makes them."""
    w = torch.arange(12, dtype=torch.float32).reshape(4, 3) / 7
    single = {"w": w, **{f"{s}:w": v for s, v in state_values({"w": w}, OPT)["w"].items()}}
    ranks = []
    for r in range(world):
        piece = w.chunk(world, 0)[r].clone()
        ranks.append({"w": piece, **{f"{s}:w": v for s, v in state_values({"w": piece}, OPT)["w"].items()}})
    as_np = lambda d: {k: v.double().numpy() for k, v in d.items()}  # noqa: E731
    return as_np(single), [as_np(r) for r in ranks]


def test_states_take_their_parameters_relation():
    seq, ranks = _values()
    shapes = {k: v.shape for k, v in seq.items()}
    out = resolve_inputs(shapes, [{k: v.shape for k, v in r.items()} for r in ranks], {}, seq, ranks,
                         made_from=state_source(OPT))
    assert out["w"].relation == Shard(0) and out["w"].how == "value"
    for s in OPT.state_names:
        assert out[f"{s}:w"].how == HOW and out[f"{s}:w"].relation == Shard(0) and out[f"{s}:w"].seq_name == f"{s}:w"
    # without the hook the same relations come from value matching (nothing else changes)
    plain = resolve_inputs(shapes, [{k: v.shape for k, v in r.items()} for r in ranks], {}, seq, ranks)
    assert {n: b.relation for n, b in plain.items()} == {n: b.relation for n, b in out.items()}


def test_state_not_made_from_its_parameter_is_refused():
    """One rank's state is not what the making code gives for its parameter (re-initialised to
    zeros, or made from other values): not related by its parameter (value matching decides)."""
    seq, ranks = _values()
    bound = {"w": InputRelation("w", "w", Shard(0), "value")}
    made = state_source(OPT)
    assert set(by_source(["exp_avg:w", "exp_avg_sq:w"], made, bound, seq, ranks)) == {"exp_avg:w", "exp_avg_sq:w"}
    zeros = [dict(r) for r in ranks]
    zeros[1]["exp_avg:w"] = np.zeros_like(zeros[1]["exp_avg:w"])
    assert set(by_source(["exp_avg:w", "exp_avg_sq:w"], made, bound, seq, zeros)) == {"exp_avg_sq:w"}
    other = [dict(r) for r in ranks]
    other[0]["exp_avg:w"], other[1]["exp_avg:w"] = ranks[1]["exp_avg:w"], ranks[0]["exp_avg:w"]  # swapped pieces
    assert "exp_avg:w" not in by_source(["exp_avg:w"], made, bound, seq, other)
    single = dict(seq, **{"exp_avg:w": seq["exp_avg:w"] * 2})  # the single device's state made otherwise
    assert "exp_avg:w" not in by_source(["exp_avg:w"], made, bound, single, ranks)


def test_partial_or_wrong_source_relation_is_refused():
    """A parameter held as a partial sum (an elementwise f of the pieces does not sum to f of the
    whole), ignored, or a layout that does not hold on the state's values: not related by the
    parameter. Partial is refused even where every rank holds the whole (replicated values)."""
    seq, ranks = _values()
    made = state_source(OPT)
    partial = {"w": InputRelation("w", "w", Partial("sum"), "given")}
    assert by_source(["exp_avg:w"], made, partial, seq, ranks) == {}
    assert by_source(["exp_avg:w"], made, partial, seq, [dict(seq) for _ in ranks]) == {}
    wrong = {"w": InputRelation("w", "w", Shard(1), "given")}
    assert by_source(["exp_avg:w"], made, wrong, seq, ranks) == {}
    ignored = {"w": InputRelation("w", "w", Ignore(), "given")}
    assert by_source(["exp_avg:w"], made, ignored, seq, ranks) == {}
    assert by_source(["exp_avg:w"], made, {}, seq, ranks) == {}  # no relation for the parameter


@pytest.mark.sweep  # a full-trace fallback of the 2-layer step (~15 CPU s): make test-all
def test_state_reinitialised_on_one_layer_located():
    import llama_step
    from shardproof.api import NO_CONFIRM
    from shardproof.step_blocks import verify_step
    report = verify_step(llama_step.step_case(2, buggy_layer=1, bug="state-init"), confirm_draws=NO_CONFIRM)
    assert report.status == "violation"
    assert "fallback" in report.blocks
    failing = {o.name for o in report.outputs if not o.holds}
    assert failing == {f"updated:layers.1.{n}.weight" for n in llama_step.PARAMS}, failing
    # the full trace's first finding: a rank's AdamW update (its moment) held of no single-device tensor
    assert report.findings and report.findings[0].op == "aten.mul"
    assert report.findings[0].source.split(" in ")[0].rsplit(":", 1)[0].endswith("mini_megatron.py")


@pytest.mark.sweep  # 2 gloo runs of 4 processes: make test-all
def test_state_init_label_on_gloo():
    from gloo import training_step_agrees
    assert training_step_agrees(os.path.join(HERE, "cases", "step_llama2.py"), 4, 2)
    assert not training_step_agrees(STATE_INIT, 4, 2)
