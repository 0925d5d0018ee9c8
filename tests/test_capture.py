"""Live capture: in-place, async and list-form collectives become functional
collectives in program order; DTensor programs capture; source lines are the user's."""
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from shardproof import Case, verify  # noqa: E402
from shardproof.frontends.torch_capture import capture_rank  # noqa: E402


class Sum(nn.Module):
    def forward(self, x):
        return x * 2


class AsyncAllReduce(nn.Module):
    """Each rank holds x / world; an async all_reduce restores 2x."""

    def forward(self, x):
        y = x * 2
        work = dist.all_reduce(y, async_op=True)
        work.wait()
        return y


def _ops(graph):
    return [n.op for n in graph.nodes]


def test_async_all_reduce_is_functional_and_verifies():
    graph, _ = capture_rank(lambda r, w: AsyncAllReduce(), 0, 2, {"x": torch.ones(4)})
    ops = _ops(graph)
    assert "_c10d_functional.all_reduce" in ops and not any(o.startswith("c10d.") for o in ops)
    case = Case(single=Sum(), distributed=lambda r, w: AsyncAllReduce(), inputs={"x": torch.randn(4, 3)},
                relations={"x": 'Partial("sum")'})
    report = verify(case)
    assert report.status == "verified", report.reason


class GatherList(nn.Module):
    """all_gather into a list of shards, then cat: the whole tensor on every rank."""

    def forward(self, x):
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x)
        return torch.cat(parts, dim=0)


class Identity(nn.Module):
    def forward(self, x):
        return x + 0


@pytest.mark.parametrize("world", [2, 3])
def test_list_all_gather_verifies(world):
    case = Case(single=Identity(), distributed=lambda r, w: GatherList(), inputs={"x": torch.randn(6, 2)},
                dist_inputs=lambda r, w, inputs: {"x": inputs["x"].chunk(w)[r]}, world_size=world)
    report = verify(case)
    assert report.status == "verified", report.reason
    assert report.outputs[0].holds == "Replicate()"


class Broadcast(nn.Module):
    def forward(self, x):
        y = x.clone()
        dist.broadcast(y, src=0)
        return y


def test_broadcast_captures_in_order():
    graph, _ = capture_rank(lambda r, w: Broadcast(), 1, 2, {"x": torch.ones(3)})
    assert "_c10d_functional.broadcast" in _ops(graph)


def test_source_is_the_users_line():
    graph, _ = capture_rank(lambda r, w: AsyncAllReduce(), 0, 2, {"x": torch.ones(4)})
    collective = next(n for n in graph.nodes if n.op == "_c10d_functional.all_reduce")
    assert collective.source is not None and collective.source.file.endswith("test_capture.py")
    assert "all_reduce" in collective.source.code


class BadReduce(nn.Module):
    def forward(self, x):
        y = x * 2
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        return y


def test_wrong_reduce_op_on_partial_is_violation():
    case = Case(single=Sum(), distributed=lambda r, w: BadReduce(), inputs={"x": torch.randn(4, 3)},
                relations={"x": 'Partial("sum")'})
    report = verify(case)
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("all_reduce", "_c10d_functional.all_reduce", [0, 1], "wrong-reduce-op")
