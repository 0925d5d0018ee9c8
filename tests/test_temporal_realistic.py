"""Issue 18's temporal hazards in realistic programs, beside the minimal ones of
tests/test_temporal.py: a write to a buffer an in-flight op still reads or writes (DDP-style
buckets flattened into one reused buffer) and two in-flight ops on one buffer (ring
attention's K/V sent and received through one tensor). Each is found at its rank, source line
and class on the events recorded on the fake process group; its twin has no finding. Labels:
the twins compute on a real gloo group what c10d says they do (the races are races by c10d
semantics: an async op's buffers belong to it until its ``wait()`` returns, so gloo may or may
not show them on a given run)."""
import functools

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

import temporal_realistic as tr  # noqa: E402
from gloo import run_with_timeout  # noqa: E402
from shardproof.engine.temporal import check  # noqa: E402
from shardproof.frontends.torch_events import record_ranks  # noqa: E402

# program -> (bug class, ranks it is found on, the first finding's line text)
HAZARDS = {"bucketed_dp_reduce": ("buffer-reused-before-completion", [0, 1], "flat.copy_(grad)  # bug"),
           "ring_kv_single_buffer": ("concurrent-buffer-access", [0, 1], "for work in dist.batch_isend_irecv(ops)")}
_LINES = open(tr.__file__).read().splitlines()


@pytest.fixture(scope="module")
def results():
    return {(name, bug): check(record_ranks(functools.partial(getattr(tr, name), bug=bug), 2))
            for name in HAZARDS for bug in (True, False)}


@pytest.mark.parametrize("name", list(HAZARDS))
def test_realistic_hazard_found_twin_clean(results, name):
    kind, ranks, text = HAZARDS[name]
    found = results[(name, True)].findings
    assert found and found[0].kind == kind, found
    assert sorted({r for f in found if f.kind == kind for r in f.rank}) == ranks
    line = int(found[0].source.split(":")[1].split()[0])
    assert text in _LINES[line - 1], (found[0].source, _LINES[line - 1])
    assert found[0].hint and found[0].message
    assert results[(name, False)].findings == [], f"{name}'s correct twin was flagged"


def test_twins_values_on_gloo():
    """The twins on a real gloo group: each bucket's dp mean; every rank's ring K/V blocks in ring order."""
    got = run_with_timeout(tr.bucketed_dp_reduce, 2, 20.0, bug=False)
    assert got is not None
    torch.manual_seed(0)
    base = [torch.randn(4) for _ in range(3)]
    for r in got:
        for i, g in enumerate(base):
            assert torch.allclose(torch.as_tensor(r[f"g{i}"]), g * 1.5)  # (1 + 2) / 2 times the seed's draw
    got = run_with_timeout(tr.ring_kv_single_buffer, 2, 20.0, bug=False)
    assert got is not None
    for rank, r in enumerate(got):
        assert [float(b[0]) for b in torch.as_tensor(r["blocks"])] == [rank, 1 - rank]
