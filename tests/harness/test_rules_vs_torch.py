"""Every claim an aten op's relation rule makes holds on the values torch computes."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import draws
from .core import Unknown, check_rule
from .ops import ENTRIES, XFAIL_RULES, declared

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def _params(xfails):
    return [pytest.param(op, marks=pytest.mark.xfail(strict=True, reason=xfails[op])) if op in xfails else op
            for op in declared() if op in ENTRIES]


@pytest.mark.parametrize("op", _params(XFAIL_RULES))
def test_rule_claims_hold_on_torch_values(op):
    fn, name = ENTRIES[op]

    @SETTINGS
    @given(st.data())
    def run(data):
        draws.MODE["rule"] = True
        try:
            d = fn(data.draw, name)
            world = data.draw(st.integers(2, 4))
            lays = draws.layouts(data.draw, d.inputs, world, d.shard)
            check_rule(d, lays, world, seed=data.draw(st.integers(0, 1000)))
        except Unknown:
            return  # no claim: nothing to check
        finally:
            draws.MODE["rule"] = False
    run()
