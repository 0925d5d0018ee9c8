"""Issue 15, "the list-form collectives capture": dist.reduce_scatter (list), dist.all_to_all
(list), dist.reduce, dist.scatter and send/recv, each in a small program at world size 2
(tests/cases/collectives/list_forms.py): the correct one verified, its buggy twin a violation
at its source line. Every label is checked by running the program on a real gloo group
against the single-device program. (tests/test_soundness_collectives.py covers the same
forms in subgroups at world sizes 3 and 4.)"""
import linecache
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import gloo_outputs, variant_agrees  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(os.path.dirname(__file__), "cases", "collectives")
sys.path.insert(0, CASES)
import list_forms  # noqa: E402

WORLD = 2


@pytest.fixture(scope="module")
def executed():
    return gloo_outputs(CASES, "list_forms", "build", list_forms.VARIANTS, WORLD)


@pytest.mark.parametrize("variant", list_forms.VARIANTS)
def test_list_form_collective_verdict_matches_gloo(executed, variant):
    case = list_forms.build(WORLD, variant)
    form = variant.removesuffix("_bug")
    correct = variant_agrees(case, [r[variant] for r in executed], case.expect["out"])
    assert correct != case.meta["buggy"], f"label of {variant} contradicted by gloo execution"
    report = verify_prepared(prepare(case, WORLD))
    if correct:
        assert report.status == "verified", report.reason
        assert [(o.name, o.holds) for o in report.outputs] == [("out", list_forms.FORMS[form][2])]
        return
    assert report.status == "violation", (report.status, report.reason)
    file, line = report.findings[0].source.split(" in ")[0].rsplit(":", 1)
    text = linecache.getline(os.path.join(ROOT, file) if not os.path.isabs(file) else file, int(line))
    assert list_forms.FORMS[form][3] in text, (report.findings[0], text)
