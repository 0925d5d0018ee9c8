"""Capture cheaper per traced op (issue 16, frontends/trace_meta.py): layouts recorded while
tracing instead of a meta run, one formatted frame per (file, line, function), sources parsed
once per text, make_fx's torch-function metadata mode off, plain arguments straight to torch.fx's
own handlers, lazy traced modules. Each graph must be exactly the one the slow reference path
(``trace_meta.REFERENCE``: make_fx's own metadata, the meta run, no caches) gives: every node's
name, op, arguments, type with strides and offset, source line and defects, the outputs and
the stated relations."""
import importlib
import os

import pytest

from conftest import ZOO

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof import api  # noqa: E402
from shardproof.frontends import meta_layouts, trace_meta  # noqa: E402
from shardproof.zoo import catalogue  # noqa: E402
from test_capture_cost import _dump  # noqa: E402

# a dp x tp training step whose dp ranks' batches are views into the whole batch (offsets), a
# Llama block's training step (attention, RoPE, its backward), a DTensor forward
CASES = (("tp_mlp_train", 2, {"dp": 2}), ("llama_block_train", 2, {"dp": 1}), ("dtensor_llama_block", 2, {}))


def _capture(name, world, kwargs, reference: bool, mp):
    mp.setattr(trace_meta, "REFERENCE", reference)
    mp.setattr(api, "SYMMETRY", False)  # every rank traced
    seq, dist, *_ = api.capture_case(importlib.import_module(name).case(world, **kwargs), world)
    return [seq, *dist.graphs]


@pytest.fixture(scope="module")
def captures():
    """{case: (fast graphs, reference graphs, meta runs in the fast capture)}"""
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        runs = []
        original = meta_layouts.meta_layouts
        mp.setattr(meta_layouts, "meta_layouts", lambda gm, args: runs.append(gm) or original(gm, args))
        for name, world, kwargs in CASES:
            runs.clear()
            fast = _capture(name, world, kwargs, False, mp)
            fast_runs = len(runs)
            out[name] = (fast, _capture(name, world, kwargs, True, mp), fast_runs)
    return out


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_fast_capture_gives_the_reference_graphs(captures, name):
    fast, reference, _ = captures[name]
    assert len(fast) == len(reference)
    for got, want in zip(fast, reference):
        assert _dump(got) == _dump(want), got.label


def test_layouts_come_from_the_trace_not_a_meta_run(captures):
    """No graph is run again on meta tensors for its layouts, and every tensor node has one
    (a dp rank's batch input with its storage offset among them)."""
    for name, (fast, _, runs) in captures.items():
        assert runs == 0, name
        for graph in fast:
            typed = [n for n in graph.nodes if getattr(n.type, "strides", "none") != "none"]
            assert typed and all(n.type.strides is not None for n in typed), (name, graph.label)
    ranks = captures["tp_mlp_train"][0][1:]
    assert any(n.type.offset for g in ranks for n in g.nodes if n.op == "input"), "a dp rank's batch slice has an offset"


def test_fast_paths_are_off_on_the_reference_path():
    """REFERENCE: make_fx's own node metadata (a fake tensor, ``tensor_meta``), no layouts kept."""
    def trace(reference):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(trace_meta, "REFERENCE", reference)
            with trace_meta.recorded_meta():
                gm = trace_meta.functional_trace(lambda x: [torch.relu(x) + 1], {})(torch.ones(2, 3))
        return [n for n in gm.graph.nodes if n.op == "call_function"]
    fast, slow = trace(False), trace(True)
    assert [n.target for n in fast] == [n.target for n in slow]
    assert all(n.meta[trace_meta.LAYOUT] == ((3, 1), 0) and n.meta["val"].device.type == "meta" for n in fast)
    assert all(trace_meta.LAYOUT not in n.meta and n.meta.get("tensor_meta") is not None and
               n.meta["val"].device.type == "cpu" for n in slow)


def _zoo_cases():
    out = []
    for folder in (ZOO, os.path.join(ZOO, "train")):
        for path in catalogue(folder):
            if os.path.dirname(path) == folder:
                name = os.path.splitext(os.path.basename(path))[0]
                out.append(pytest.param(name, id=name))
    return out


@pytest.mark.sweep  # every zoo case captured twice: make test-all
@pytest.mark.parametrize("name", _zoo_cases())
def test_every_zoo_case_captures_the_reference_graphs(name):
    module = importlib.import_module(name)
    world = getattr(module, "WORLD_SIZES", (2,))[0]
    with pytest.MonkeyPatch.context() as mp:
        fast = _capture(name, world, {}, False, mp)
        reference = _capture(name, world, {}, True, mp)
    assert [_dump(g) for g in fast] == [_dump(g) for g in reference]
