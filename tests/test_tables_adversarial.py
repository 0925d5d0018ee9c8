"""Trying to make the input-independent tables (engine/tables.py) lie: each rank's RoPE table
and causal mask taken from another rank's offset is an exact block of the single-device table,
only the wrong one; it must be a violation. Positions taken as a row of a reshaped arange and a
mask written as a comparison of absolute positions are correct and must still be proved. The
programs use no collective, so each rank's program run alone is what it computes in a group:
the labels come from running them with torch."""
import os
import sys

import pytest
import torch

from shardproof.api import verify_case

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cases", "same_math"))
import rope_tables_adversarial as adv  # noqa: E402


def _agrees(case) -> bool:
    whole = case.single(**case.inputs)["out"]
    return all(torch.allclose(case.distributed(r, case.world_size)(**case.dist_inputs(r, case.world_size, case.inputs))["out"],
                              whole.chunk(case.world_size, 1)[r], atol=1e-5)
               for r in range(case.world_size))


@pytest.mark.parametrize("world", [2, 4])
def test_another_ranks_table_is_a_violation(world):
    case = adv.case(world, "reversed")
    assert not _agrees(case)
    report = verify_case(case)
    assert report.status == "violation", report.reason
    assert report.findings[0].op == "aten.mul"


@pytest.mark.parametrize("world", [2, 4])
def test_tables_written_oddly_are_proved(world):
    case = adv.case(world, "odd")
    assert _agrees(case)
    report = verify_case(case)
    assert report.status == "verified" and report.strength == "proof", report.reason
