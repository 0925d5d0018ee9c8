"""Two forms torchtitan's Llama computes, on attention heads split over ranks:
- complex RoPE (complex tensors as real pairs): proved; a rank reading the table at the wrong
  rows is a violation at the slice of the table;
- sdpa with fewer key/value heads than query heads (grouped-query attention): proved when each
  rank holds the key/value heads its queries read, a violation when they are swapped.
The labels come from a real gloo group (the slow test)."""
import os
import sys

import numpy as np
import pytest
import torch

from shardproof import api
from shardproof.ops.registry import lookup

CASES = os.path.join(os.path.dirname(__file__), "cases")
ROPE, GQA = os.path.join(CASES, "complex_rope.py"), os.path.join(CASES, "gqa_sdpa.py")
PAIRS = [(ROPE, "shifted_table", 2), (GQA, "kv_swapped", 1)]  # case, its bug, the sharded dim
sys.path.insert(0, os.path.dirname(__file__))


def _report(monkeypatch, path, bug=""):
    import gloo
    monkeypatch.setenv("BUG", bug)
    return api.verify_case(gloo.load_case(path, 2))


def test_view_numerics_match_torch():
    x = torch.randn(3, 4, 2)
    z = torch.view_as_complex(x)
    assert np.allclose(lookup("aten.view_as_complex").numerics(x.numpy()), z.numpy())
    assert np.allclose(lookup("aten.view_as_real").numerics(z.numpy()), torch.view_as_real(z).numpy())


@pytest.mark.parametrize("path,bug,dim", PAIRS)
def test_head_sharded_program_verifies(monkeypatch, path, bug, dim):
    report = _report(monkeypatch, path)
    assert report.status == "verified", (report.status, report.reason, report.findings[:1])
    assert [(o.name, o.holds) for o in report.outputs] == [("out", f"Shard({dim})")]


def test_shifted_table_is_located(monkeypatch):
    report = _report(monkeypatch, ROPE, "shifted_table")
    assert report.status == "violation", (report.status, report.reason)
    f = report.findings[0]
    # at the slice of the table (``self.cache[self.shift:...]``), the rows rank 1 reads wrongly
    assert f.kind == "wrong-shard-offset" and f.op == "aten.slice" and 1 in f.rank, f
    assert "complex_rope.py" in (f.source or "") and "in forward" in f.source, f


def test_swapped_kv_heads_is_a_violation(monkeypatch):
    report = _report(monkeypatch, GQA, "kv_swapped")
    assert report.status == "violation", (report.status, report.reason)
    assert "scaled_dot_product" in report.findings[0].op, report.findings[0]


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("path,bug,dim", PAIRS)
def test_labels_on_gloo(path, bug, dim):
    import gloo
    for name, agrees in (("", True), (bug, False)):
        diffs = gloo.sharded_differences(path, 2, dim, {"BUG": name})
        assert all(d < 1e-5 for d in diffs) == agrees, (name, diffs)
