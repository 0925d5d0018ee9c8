"""Temporal checks (engine/temporal.py over frontends/torch_events.py): each hazard in a
minimal and a realistic program (tests/temporal_programs.py) is found at its rank and
source line with its bug class; each correct twin has no finding; the correct zoo cases
have none; a live case whose async all_reduce is read before wait() is a violation
although its values relate (the functional capture makes every collective synchronous).
Labels: the hangs and the twins' values on a real gloo group (tests/gloo.py)."""
import functools
import importlib
import os

import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

import temporal_programs as tp  # noqa: E402
from conftest import ZOO  # noqa: E402
from shardproof import Case, verify  # noqa: E402
from shardproof.engine.temporal import check  # noqa: E402
from shardproof.frontends.torch_events import record_ranks  # noqa: E402

# program -> (bug class, ranks it is found on, the line's text)
HAZARDS = {
    "use_before_wait": ("use-before-wait", [0, 1], "y = x * 2  # reads x"),
    "send_buffer_reused": ("buffer-reused-before-completion", [0], "x.add_(10)  # overwrites"),
    "two_ops_one_buffer": ("concurrent-buffer-access", [0, 1], "w2 = dist.all_reduce(y"),
    "collective_order": ("collective-order-mismatch", [0, 1], "dist.all_gather_into_tensor(out, x)"),
    "recv_first": ("deadlock", [0, 1], "dist.recv(got, peer)"),
    "send_first": ("deadlock", [0, 1], "dist.send(x, peer)"),
    "zero3_prefetch": ("use-before-wait", [0, 1], "h = torch.tanh(F.linear(h, weight))"),
    "overlapped_dp_step": ("use-before-wait", [0, 1], "new = {n: p - lr * p.grad"),
    "groups_in_rank_order": ("collective-order-mismatch", [0, 1], "dist.all_reduce(grads[name]"),
    "pipeline_1f1b": ("deadlock", [0, 1], "dist.recv(grad, peer)  # waits"),
    "bucketed_dp_reduce": ("buffer-reused-before-completion", [0, 1], "flat.copy_(grad)  # bug"),
    "ring_kv_single_buffer": ("concurrent-buffer-access", [0, 1], "for work in dist.batch_isend_irecv(ops)"),
}
_LINES = open(tp.__file__).read().splitlines()


@pytest.fixture(scope="module")
def results():
    """Each program's check result, bug and twin, from one event capture each."""
    return {(name, bug): check(record_ranks(functools.partial(getattr(tp, name), bug=bug), 2))
            for name in HAZARDS for bug in (True, False)}


@pytest.mark.parametrize("name", list(HAZARDS))
def test_hazard_found_at_its_line_and_twin_clean(results, name):
    kind, ranks, text = HAZARDS[name]
    found = results[(name, True)].findings
    assert found, f"{name}: no temporal finding"
    first = found[0]
    assert first.kind == kind
    assert sorted({r for f in found if f.kind == kind for r in f.rank}) == ranks
    line = int(first.source.split(":")[1].split()[0])
    assert text in _LINES[line - 1], (first.source, _LINES[line - 1])
    assert first.hint and first.message
    assert results[(name, False)].findings == [], f"{name}'s correct twin was flagged"


def test_deadlock_names_the_cycle(results):
    msg = results[("pipeline_1f1b", True)].findings[0].message
    assert "rank 0 blocks in recv" in msg and "rank 1 blocks in recv" in msg
    msg = results[("groups_in_rank_order", True)].findings[0].message
    assert "group" in msg and "different orders" in msg


def test_unmatched_collective_is_a_hang():
    def one_sided(rank, world):
        x = torch.ones(2)
        if rank == 0:
            dist.all_reduce(x)
        return {"x": x}
    found = check(record_ranks(one_sided, 2)).findings
    assert [f.kind for f in found] == ["deadlock"] and found[0].rank == [0] and "never issue" in found[0].message


def test_wait_through_the_future_counts():
    def via_future(rank, world):
        x = torch.ones(4)
        dist.all_reduce(x, async_op=True).get_future().wait()
        return {"x": x * 2}
    assert check(record_ranks(via_future, 2)).findings == []


def test_strided_views_of_one_buffer_do_not_clash():
    """Even and odd columns of one storage received at once: disjoint elements, no hazard;
    overlapping column ranges: a hazard on the receiving rank (two sends may read one buffer)."""
    def columns(rank, world, step=2):
        x = torch.ones(4, 4)
        a, b = x[:, 0::step], x[:, 1::step]
        works = [dist.isend(a, 1 - rank), dist.isend(b, 1 - rank)] if rank == 0 else [
            dist.irecv(a, 0), dist.irecv(b, 0)]
        for work in works:
            work.wait()
        return {"x": x}
    assert check(record_ranks(columns, 2)).findings == []
    found = check(record_ranks(functools.partial(columns, step=1), 2)).findings
    assert found and found[0].kind == "concurrent-buffer-access" and found[0].rank == [1]


# ---------------------------------------------------------------- wired into verification

class RowParallel(nn.Module):
    def __init__(self, full: nn.Linear, rank: int, world: int, bug: bool):
        super().__init__()
        self.weight = nn.Parameter(full.weight.detach().chunk(world, 1)[rank].clone())
        self.rank, self.world, self.bug = rank, world, bug

    def forward(self, input):
        y = torch.nn.functional.linear(input.chunk(self.world, -1)[self.rank], self.weight)
        work = dist.all_reduce(y, async_op=True)
        if self.bug:
            out = y * 1.0  # read before the reduction is waited on
            work.wait()
            return out
        work.wait()
        return y * 1.0


def _case(bug: bool) -> Case:
    torch.manual_seed(0)
    full = nn.Linear(8, 4, bias=False)
    return Case(single=full, distributed=lambda rank, world: RowParallel(full, rank, world, bug),
                inputs={"input": torch.randn(3, 8)}, world_size=2)


def test_async_read_before_wait_is_a_violation_its_twin_verified():
    bug = verify(_case(True))
    assert bug.status == "violation"
    f = bug.findings[0]
    assert f.kind == "use-before-wait" and f.rank == [0]
    assert [x.rank for x in bug.findings] == [[0], [1]]
    assert f.source and f.source.endswith("in forward") and "test_temporal.py" in f.source
    assert bug.temporal["checked"] and bug.temporal["findings"] >= 1
    ok = verify(_case(False))
    assert ok.status == "verified", ok
    assert ok.temporal == {**ok.temporal, "checked": True, "findings": 0}


@pytest.mark.sweep
def test_correct_zoo_cases_have_no_temporal_finding():
    """Each correct forward zoo case's events recorded by an eager run (the path of ranks
    that issue async ops) at its smallest world size: no hazard. (Under make test, every
    correct zoo case, training steps included, is checked on its graph's events inside
    test_zoo / test_training's verifications: a temporal finding makes them a violation.)"""
    from shardproof.frontends.torch_capture import fake_world
    from shardproof.frontends.torch_events import program_events
    from shardproof.zoo import catalogue
    checked = 0
    for path in catalogue(ZOO):
        if os.path.dirname(path) != ZOO:
            continue
        module = importlib.import_module(os.path.splitext(os.path.basename(path))[0])
        world = min(getattr(module, "WORLD_SIZES", (2,)))
        case = module.case(world)
        ranks = []
        for rank in range(world):
            data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else case.inputs
            with fake_world(rank, world):
                ranks.append(program_events(case.distributed(rank, world), data, rank))
        assert all(r.complete for r in ranks), (path, [r.notes for r in ranks])
        assert check(ranks).findings == [], path
        checked += 1
    assert checked >= 15


# ---------------------------------------------------------------- labels on gloo

@pytest.mark.sweep
@pytest.mark.parametrize("name", list(HAZARDS))
def test_labels_on_gloo(name):
    """Deadlocks hang on a real gloo group and their twins finish; every twin finishes (the
    races are races by c10d semantics: gloo may or may not show them on a given run)."""
    from gloo import run_with_timeout
    program = getattr(tp, name)
    twin = run_with_timeout(program, 2, 5.0, bug=False)
    assert twin is not None and all(isinstance(r, dict) for r in twin), twin
    if HAZARDS[name][0] in ("deadlock", "collective-order-mismatch"):
        assert run_with_timeout(program, 2, 2.0, bug=True) is None, f"{name} did not hang on gloo"


def test_twin_values_on_gloo():
    """The twins compute what c10d says they do (the fast part of the labels)."""
    from gloo import run_with_timeout
    got = run_with_timeout(tp.use_before_wait, 2, 5.0, bug=False)
    assert all((r["y"] == 6).all() for r in got)
    got = run_with_timeout(tp.pipeline_1f1b, 2, 5.0, bug=False)
    assert got is not None
    assert run_with_timeout(tp.recv_first, 2, 2.0, bug=True) is None  # the minimal deadlock hangs


def test_realistic_buffer_twins_values_on_gloo():
    """The realistic buffer programs' twins on gloo: each bucket's dp mean; every rank's ring K/V
    blocks in ring order."""
    from gloo import run_with_timeout
    got = run_with_timeout(tp.bucketed_dp_reduce, 2, 20.0, bug=False)
    assert got is not None
    torch.manual_seed(0)
    base = [torch.randn(4) for _ in range(3)]
    assert all(torch.allclose(torch.as_tensor(r[f"g{i}"]), g * 1.5) for r in got for i, g in enumerate(base))
    got = run_with_timeout(tp.ring_kv_single_buffer, 2, 20.0, bug=False)
    assert got is not None
    assert [[float(b[0]) for b in torch.as_tensor(r["blocks"])] for r in got] == [[0, 1], [1, 0]]


class SwappedOrder(RowParallel):
    """Row-parallel output reduced and a replicated feature gathered; with `bug`, rank 1
    issues the two collectives in the other order (each rank's values would be right if
    the collectives were matched by tensor, which c10d does not do)."""

    def forward(self, input):
        y = torch.nn.functional.linear(input.chunk(self.world, -1)[self.rank], self.weight)
        z = input.sum(0).chunk(self.world)[self.rank].contiguous()
        gathered = torch.empty(z.numel() * self.world)
        if self.bug and self.rank == 1:
            dist.all_gather_into_tensor(gathered, z)
            dist.all_reduce(y)
        else:
            dist.all_reduce(y)
            dist.all_gather_into_tensor(gathered, z)
        return y, gathered


class AsyncOnOneRank(RowParallel):
    """Rank 0 overlaps its reduction (async, waited before use), rank 1 reduces synchronously:
    events of rank 0 from an eager run, of rank 1 from its graph."""

    def forward(self, input):
        if self.rank == 0:
            return super().forward(input)
        y = torch.nn.functional.linear(input.chunk(self.world, -1)[self.rank], self.weight)
        dist.all_reduce(y)
        return y * 1.0


def _single_swapped(full):
    class Single(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = full.weight

        def forward(self, input):
            return torch.nn.functional.linear(input, self.weight), input.sum(0)
    return Single()


def test_collectives_in_different_orders_on_a_live_case():
    torch.manual_seed(0)
    full = nn.Linear(8, 4, bias=False)

    def case(bug):
        return Case(single=_single_swapped(full),
                    distributed=lambda rank, world: SwappedOrder(full, rank, world, bug),
                    inputs={"input": torch.randn(3, 8)}, world_size=2)
    bug = verify(case(True))
    assert bug.status == "violation"
    kinds = [f.kind for f in bug.findings]
    assert "collective-order-mismatch" in kinds, bug.findings
    f = bug.findings[kinds.index("collective-order-mismatch")]
    assert f.rank == [0, 1] and "all_gather_into_tensor(gathered, z)" in _source_line(f.source)
    ok = verify(case(False))
    assert ok.status == "verified" and ok.temporal["checked"] and ok.temporal["findings"] == 0


def test_async_on_one_rank_only_is_checked_and_clean():
    torch.manual_seed(0)
    full = nn.Linear(8, 4, bias=False)
    report = verify(Case(single=full, distributed=lambda rank, world: AsyncOnOneRank(full, rank, world, False),
                         inputs={"input": torch.randn(3, 8)}, world_size=2))
    assert report.status == "verified" and report.temporal["checked"] and report.temporal["findings"] == 0
    assert report.temporal["events"] >= 3  # rank 0: issue, wait, read of the result; rank 1: issue


def _source_line(source: str) -> str:
    path, rest = source.rsplit(":", 1)
    return open(path).read().splitlines()[int(rest.split()[0]) - 1]


def test_cli_no_temporal(tmp_path):
    """--no-temporal: no temporal section, for that run only."""
    import json
    from shardproof import api
    from shardproof.cli import main
    case = os.path.join(ZOO, "vocab_parallel_embedding.py")  # a fast case
    off = tmp_path / "off.json"
    assert main(["verify", case, "--no-confirm", "--no-fix", "-qq", "--no-temporal", "--json", str(off)]) == 2
    assert json.loads(off.read_text())["temporal"] is None
    assert api.TEMPORAL is True


def _overlapped_ddp_case(bug: bool):
    """ddp_bucket_train with each bucket's all_reduce issued async (overlapping the next
    bucket's flattening); the bug unflattens a bucket before waiting for its reduction."""
    import sys
    sys.path.insert(0, os.path.join(ZOO, "train"))
    import ddp_bucket_train as ddp

    class Overlapped(ddp.BucketedGradients):
        def reduce_gradients(self, grads):
            pending = []
            for bucket in self.buckets(list(grads)):
                flat = self.flatten(grads, bucket)
                pending.append((bucket, flat, dist.all_reduce(flat, group=self.mesh.dp_group, async_op=True)))
            reduced = {}
            for bucket, flat, work in pending:
                if not bug:
                    work.wait()
                for n, start, end in self.offsets(grads, bucket):
                    reduced[n] = flat[start:end].view_as(grads[n]).clone()  # BUG when not waited
                work.wait()
            return {n: reduced[n] for n in grads}
    return ddp.case(2, dp=2, model=Overlapped, name="overlapped_ddp")


@pytest.mark.sweep
def test_overlapped_ddp_training_step():
    """A training step's async gradient buckets: read before wait is found at its line on
    every rank (the step run eagerly, its parameters swapped for copies); the twin verifies."""
    bug = verify(_overlapped_ddp_case(True))
    temporal = [f for f in bug.findings if f.kind == "use-before-wait"]
    assert bug.status == "violation" and temporal, bug
    assert sorted({r for f in temporal for r in f.rank}) == [0, 1]
    assert "BUG when not waited" in _source_line(temporal[0].source)
    ok = verify(_overlapped_ddp_case(False))
    assert ok.status == "verified" and ok.temporal["checked"] and ok.temporal["findings"] == 0, ok.temporal


# ---------------------------------------------------------------- P2P programs as captured (Graph.events)

class Swap(nn.Module):
    """Each rank computes its half of ``x @ w`` and swaps it with the other rank by blocking
    send/recv; both return the whole product. `order`: "ok" (rank 0 sends first, rank 1
    receives first), "recv" (both receive first), "send" (both send first); "waited" (an
    irecv, the send, wait(), then the result) and "early" (the received half read before
    wait())."""

    def __init__(self, w, rank: int, order: str):
        super().__init__()
        self.w, self.rank, self.order = nn.Parameter(w.clone()), rank, order

    def forward(self, x):
        mine = x.chunk(2)[self.rank] @ self.w
        theirs = torch.empty_like(mine)
        peer = 1 - self.rank
        if self.order in ("waited", "early"):
            work = dist.irecv(theirs, peer)
            dist.send(mine, peer)
            if self.order == "early":
                theirs = theirs * 1.0  # reads the receive buffer before wait()
            work.wait()
        elif (self.rank == 0) if self.order == "ok" else self.order == "send":
            dist.send(mine, peer)  # sends first
            dist.recv(theirs, peer)
        else:
            dist.recv(theirs, peer)  # receives first
            dist.send(mine, peer)
        return torch.cat([mine, theirs] if self.rank == 0 else [theirs, mine])


class _Product(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(w.clone())

    def forward(self, x):
        return x @ self.w


def _swap_case(order: str) -> Case:
    torch.manual_seed(0)
    w, x = torch.randn(3, 2), torch.randn(4, 3)
    return Case(single=_Product(w), distributed=lambda rank, world: Swap(w, rank, order), inputs={"x": x},
                world_size=2, name=f"p2p_swap_{order}")


def _swap_on_gloo(rank, world, order):
    case = _swap_case(order)
    with torch.no_grad():
        return {"out": case.distributed(rank, world)(**case.inputs)}


@pytest.fixture(scope="module")
def swaps():
    """Each order's report (capture, relations, temporal checks on the P2P capture's events)."""
    from shardproof.api import prepare, verify_prepared
    return {order: verify_prepared(prepare(_swap_case(order), 2), fixes=False)
            for order in ("ok", "recv", "send", "waited", "early")}


@pytest.mark.parametrize("order,text", [("recv", "dist.recv(theirs, peer)  # receives first"),
                                        ("send", "dist.send(mine, peer)  # sends first")])
def test_captured_p2p_blocking_both_first_is_a_deadlock(swaps, order, text):
    """Both ranks block in a send (or a recv) first: the values would relate (the pairing is
    per channel), but the temporal check on the captured events finds the cycle, at the
    graph node of the op each rank blocks in."""
    from shardproof.api import prepare
    report = swaps[order]
    assert report.status == "violation", report.findings
    f = next(f for f in report.findings if f.kind == "deadlock")
    assert f.rank == [0, 1] and f.op == f"c10d.{order}"
    assert text in _source_line(f.source), f.source
    assert f"rank 0 blocks in {order}" in f.message and f"rank 1 blocks in {order}" in f.message
    graph = prepare(_swap_case(order), 2).dist.graphs[0]
    assert graph.node(f.node).op == f"shardproof_p2p.{order}"


def test_captured_p2p_correct_order_has_no_finding(swaps):
    report = swaps["ok"]
    assert report.status == "verified", (report.reason, report.findings)
    assert report.temporal["checked"] and report.temporal["findings"] == 0
    assert report.temporal["events"] == 4  # a send and a recv on each rank


def test_captured_irecv_read_before_wait(swaps):
    """An irecv's buffer read before wait(): the rank is run eagerly (it issued an async
    P2P op), the read found at its line on both ranks; the eager run's P2P issues carry the
    captured graph's nodes. The twin (wait() first) verifies with no finding."""
    from shardproof.api import prepare
    bug, ok = swaps["early"], swaps["waited"]
    found = [f for f in bug.findings if f.kind == "use-before-wait"]
    assert bug.status == "violation" and found, bug.findings
    assert sorted({r for f in found for r in f.rank}) == [0, 1]
    assert "reads the receive buffer before wait()" in _source_line(found[0].source), found[0].source
    assert ok.status == "verified" and ok.temporal["checked"] and ok.temporal["findings"] == 0, ok.temporal
    graph = prepare(_swap_case("waited"), 2).dist.graphs[0]
    assert graph.events.complete and not graph.events.from_graph
    assert [graph.node(e.node).op for e in graph.events.p2p()] == ["shardproof_p2p.recv", "shardproof_p2p.send"]


@pytest.mark.sweep
def test_swap_labels_on_gloo():
    """The twin finishes with the single-device product; both orders hang on gloo."""
    from gloo import run_with_timeout
    case = _swap_case("ok")
    with torch.no_grad():
        want = case.single(**case.inputs)
    for order in ("ok", "waited"):
        got = run_with_timeout(_swap_on_gloo, 2, 10.0, order=order)
        assert got is not None and all(torch.allclose(torch.as_tensor(r["out"]), want) for r in got), got
    for order in ("recv", "send"):
        assert run_with_timeout(_swap_on_gloo, 2, 3.0, order=order) is None, f"{order} first did not hang"


def _blocking_pipeline(first: str):
    """The zoo's pp2 1F1B MLP step with Megatron's exchange written as blocking send/recv,
    `first` ("recv" or "send") first on every stage: in the steady state stage 0 blocks
    before the activation stage 1 waits for leaves (or before it takes the gradient stage 1
    blocks sending)."""
    import pipeline_mlp_1f1b
    from mini_pipeline import PipelineTraining

    class Blocking(PipelineTraining):
        def exchange(self, send_next=None, send_prev=None, recv_next=None, recv_prev=None):
            bufs = {k: torch.empty(s) for k, s in (("prev", recv_prev), ("next", recv_next)) if s is not None}
            peer = {"prev": self.prev_rank, "next": self.next_rank}
            sends = [(dist.send, t.contiguous(), peer[k]) for k, t in (("prev", send_prev), ("next", send_next))
                     if t is not None]
            recvs = [(dist.recv, b, peer[k]) for k, b in bufs.items()]
            for op, t, to in (recvs + sends if first == "recv" else sends + recvs):
                op(t, to())  # blocks until the peer's matching op
            return bufs
    return pipeline_mlp_1f1b.case(2, model=Blocking, name=f"pipeline_blocking_{first}_first")


@pytest.mark.parametrize("first", ["recv", "send"])
def test_pipeline_stages_blocking_first_is_a_deadlock(first):
    """1F1B's stages both block in a receive (or a send) first: a deadlock found on the
    captured step's events, at the op's graph node, stage and microbatch. (The zoo's own
    1F1B, its correct twin, has no temporal finding: tests/test_pipeline.py.)"""
    from shardproof.api import prepare
    from shardproof.engine.temporal import check as check_events
    prepared = prepare(_blocking_pipeline(first), 2)
    found = check_events([g.events for g in prepared.dist.graphs]).findings
    assert [f.kind for f in found] == ["deadlock"], found
    f = found[0]
    assert f.rank == [0, 1] and f.op == f"c10d.{first}" and f.stage == 0 and f.microbatch == 1, f
    assert "blocks until the peer's matching op" in _source_line(f.source)
    assert prepared.dist.graphs[0].node(f.node).op == f"shardproof_p2p.{first}"


def _pipeline_on_gloo(rank, world, first):
    from dataclasses import replace
    case = _blocking_pipeline(first) if first else importlib.import_module("pipeline_mlp_1f1b").case(2)
    data = case.dist_inputs(rank, world, case.inputs)
    return case.distributed(rank, world).train_step(data, {}, replace(case.train, optimizer=None))["grads"]


@pytest.mark.sweep
def test_blocking_pipeline_labels_on_gloo():
    """The zoo's 1F1B finishes on gloo; both blocking variants hang."""
    from gloo import run_with_timeout
    assert run_with_timeout(_pipeline_on_gloo, 2, 60.0, first=None) is not None
    for first in ("recv", "send"):
        assert run_with_timeout(_pipeline_on_gloo, 2, 10.0, first=first) is None, f"{first} first did not hang"
