"""The declared numpy numerics of every aten op agree with torch's own kernel."""
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from . import draws
from .core import check_numerics, examples
from .ops import ENTRIES, XFAIL_NUMERICS, declared

SETTINGS = settings(max_examples=examples(12), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])


def test_every_op_has_an_entry():
    missing = [op for op in declared() if op not in ENTRIES]
    assert not missing, f"ops declared without a harness entry (add one in tests/harness/table*.py): {missing}"


def _params(xfails):
    return [pytest.param(op, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=xfails[op])) if op in xfails else op
            for op in declared() if op in ENTRIES]


@pytest.mark.parametrize("op", _params(XFAIL_NUMERICS))
def test_numerics_match_torch(op):
    fn, name = ENTRIES[op]

    @SETTINGS
    @given(st.data())
    def run(data):
        draws.MODE["rule"] = False
        check_numerics(fn(data.draw, name))
    run()


@pytest.mark.parametrize("base", ["transposed", "offset", "expanded"])
def test_as_strided_of_a_strided_base(base):
    """Regression (issue 14 class 6, fixed on the casts branch): as_strided reads storage;
    the numerics map each position read back to the element of the base stored there."""
    import torch
    from .core import Draw, T
    x = torch.arange(6.0, dtype=torch.float64).reshape(3, 2).t()  # storage order differs from value order
    args = (T("x"), [2, 2], [1, 2], 0)
    if base == "offset":
        x = torch.arange(9.0, dtype=torch.float64)[3:].view(2, 3)
        args = (T("x"), [2, 2], [1, 3])  # the view starts at the base's own storage offset
    elif base == "expanded":
        x = torch.arange(3.0, dtype=torch.float64).view(1, 3).expand(4, 3)
        args = (T("x"), [2, 2], [1, 1], 0)  # storage holds 3 values: positions 0, 1, 1, 2
    check_numerics(Draw("aten.as_strided", {"x": x}, args))


@pytest.mark.parametrize("op", ["aten.bitwise_and", "aten.bitwise_or", "aten.bitwise_xor"])
def test_bitwise_of_a_narrow_int_and_an_out_of_range_scalar(op):
    """Regression: a Python int beside a uint8/int8 tensor wraps to the tensor's dtype, as in
    torch (numpy refused it: "Python integer -1 out of bounds for uint8")."""
    import torch
    from .core import Draw, T
    for dt in (torch.uint8, torch.int8):
        x = torch.tensor([3, 100, 0, 127], dtype=dt)
        for c in (-1, 259, -129):
            check_numerics(Draw(op, {"x": x}, (T("x"), c)))
