"""Issue 15, "ordinary ops with no rule": each op in a small TP/SP program, correct and buggy
(tests/cases/ops/sharded_ops.py). Every label is checked by running the program on a real
gloo group against the single-device program; a correct program must be verified, a buggy
one a violation at the op applied to the wrong shards."""
import importlib
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import gloo_outputs, variant_agrees  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402
from shardproof.ops.aten_misc import SAME_RANDOMNESS  # noqa: E402

CASES = os.path.join(os.path.dirname(__file__), "cases", "ops")
sys.path.insert(0, CASES)
ops = importlib.import_module("sharded_ops")
WORLD = 2


@pytest.fixture(scope="module")
def executed():
    return gloo_outputs(CASES, "sharded_ops", "build", list(ops.VARIANTS), WORLD)


@pytest.mark.parametrize("variant", list(ops.VARIANTS))
def test_op_pair_verdict_matches_execution(executed, variant):
    case = ops.build(WORLD, variant)
    correct = variant_agrees(case, [r[variant] for r in executed], case.expect["out"])
    assert correct != case.meta["buggy"], f"label of {variant} contradicted by gloo execution"
    report = verify_prepared(prepare(case, WORLD))
    if correct and variant in ops.UNKNOWN_OK:  # no lemma yet: honestly unknown, naming the op
        assert report.status in ("verified", "unknown"), (report.status, report.findings)
        assert report.status == "verified" or "aten." in report.reason, report.reason
    elif correct:
        assert report.status == "verified", report.reason
        if variant in ops.RANDOM:  # the convention random ops rely on is stated in the report
            assert SAME_RANDOMNESS in report.assumptions, report.assumptions
    else:
        assert report.status == "violation", (report.status, report.reason)
        assert report.findings[0].op == ops.BUG_OPS[variant], report.findings[0]
