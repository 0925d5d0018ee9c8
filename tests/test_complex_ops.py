"""Complex tensors as real pairs: torchtitan's complex RoPE on head-sharded activations is proved;
a rank reading the table at the wrong rows is a violation at the product with the table. The
labels come from a real gloo group (the slow test)."""
import os
import sys

import numpy as np
import pytest
import torch

from shardproof import api
from shardproof.ops.registry import lookup

CASE = os.path.join(os.path.dirname(__file__), "cases", "complex_rope.py")
sys.path.insert(0, os.path.dirname(__file__))


def _report(monkeypatch, bug=""):
    import gloo
    monkeypatch.setenv("BUG", bug)
    return api.verify_case(gloo.load_case(CASE, 2))


def test_view_numerics_match_torch():
    x = torch.randn(3, 4, 2)
    z = torch.view_as_complex(x)
    assert np.allclose(lookup("aten.view_as_complex").numerics(x.numpy()), z.numpy())
    assert np.allclose(lookup("aten.view_as_real").numerics(z.numpy()), torch.view_as_real(z).numpy())


def test_complex_rope_on_sharded_heads_verifies(monkeypatch):
    report = _report(monkeypatch)
    assert report.status == "verified", (report.status, report.reason, report.findings[:1])
    assert [(o.name, o.holds) for o in report.outputs] == [("out", "Shard(2)")]


def test_shifted_table_is_located(monkeypatch):
    report = _report(monkeypatch, "shifted_table")
    assert report.status == "violation", (report.status, report.reason)
    f = report.findings[0]
    # at the slice of the table (``self.cache[self.shift:...]``), the rows rank 1 reads wrongly
    assert f.kind == "wrong-shard-offset" and f.op == "aten.slice" and 1 in f.rank, f
    assert "complex_rope.py" in (f.source or "") and "in forward" in f.source, f


@pytest.mark.slow
@pytest.mark.sweep
def test_labels_on_gloo(monkeypatch):
    import gloo
    for bug, agrees in (("", True), ("shifted_table", False)):
        monkeypatch.setenv("BUG", bug)
        run = gloo.run_case_file(CASE, 2)
        whole = run.single["out"]
        diffs = [float((r["out"] - whole.chunk(2, 2)[i]).abs().max()) for i, r in enumerate(run.ranks)]
        assert all(d < 1e-5 for d in diffs) == agrees, (bug, diffs)
