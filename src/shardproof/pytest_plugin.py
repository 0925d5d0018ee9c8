"""A pytest plugin: ``pytest --shardproof cases/`` collects every Python file that defines
``case(...)`` as one test, verified at the case's world size. A case whose ``meta`` states a
bug (``bug``, ``bug_node``, ``bug_ranks``, as the zoo's do) must be that violation; one
marked ``pending`` is skipped; any other must be verified. A failure shows the rendered
report. Enabled by ``-p shardproof.pytest_plugin`` (or installed, through its entry point).
"""
from __future__ import annotations

import re

import pytest

_DEFINES_CASE = re.compile(r"^def case\(", re.M)


def pytest_addoption(parser):
    parser.getgroup("shardproof").addoption(
        "--shardproof", action="store_true", help="collect Python files that define case() as shardproof tests")


def _case_file(file_path, parent):
    if not parent.config.getoption("shardproof", False) or file_path.suffix != ".py" \
            or file_path.name.startswith(("_", "test_", "conftest")):
        return None
    try:
        text = file_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return CaseFile.from_parent(parent, path=file_path) if _DEFINES_CASE.search(text) else None


def pytest_collect_file(file_path, parent):
    """Case files found under a directory (files named on the command line: below)."""
    return None if parent.session.isinitpath(file_path) else _case_file(file_path, parent)


def pytest_pycollect_makemodule(module_path, parent):
    """A case file named on the command line: a shardproof test, not a module to import."""
    return _case_file(module_path, parent)


class CaseFile(pytest.File):
    def collect(self):
        yield CaseItem.from_parent(self, name="case")


class CaseItem(pytest.Item):
    def runtest(self):
        from .testing import assert_verified, assert_violation, load_case
        from .zoo import expectation
        case = load_case(self.path)
        expected = expectation(case.meta or {}, case.world_size)
        if expected.verdict == "pending":
            pytest.skip(expected.detail)
        if expected.verdict == "violation":
            assert_violation(case, case.world_size, at=(expected.node, expected.op), kind=expected.kind,
                             ranks=expected.ranks)
        elif expected.verdict == "verified":
            assert_verified(case, case.world_size)
        else:
            pytest.skip(f"expected unknown ({expected.detail})")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, AssertionError):
            return str(excinfo.value)  # the rendered report
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"shardproof case {self.path.name}"
