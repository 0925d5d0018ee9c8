"""The training step's per-parameter tail by class contracts (issue 16: sub-linear in the layers).

Inside :func:`shardproof.step_blocks.verify_step`'s tail capture, every parameter's optimizer
update is one opaque call (:mod:`shardproof.frontends.torch_tail_calls`). This module proves
what the calls mean, **once per class**: parameters whose updates have the same optimizer key
(type and every hyperparameter), single-device shape, dtype and layout on every rank (their
input relation) form one class, and one small program -- the plain (elementwise) update of one
representative per class, single device against every rank holding the class's layout of its
parameter, gradient and state -- is captured and proved by the engine for all of them at once.
A class is admitted (``ops.tail_calls.PROVED``) only where the engine proved that each rank's
output holds exactly that layout of the single-device update; the rule then applies it to every
call of the class (:mod:`shardproof.ops.tail_calls`). An update whose parameter is not a step
input with a relation, or whose class is not proved, is left to the rule, which refuses it: the
engine answers unknown at that call and the step falls back to its full trace."""
from __future__ import annotations

import contextlib

import numpy as np

from .ops import tail_calls as tc

__all__ = ["update_classes", "proved_updates"]

_DTYPES = {"f32": "float32", "f64": "float64"}


def update_classes(p) -> dict:
    """The update calls of a prepared step grouped by class: ``{(key, shape, dtype, relation
    text): {"key", "shape", "dtype", "relation", "params": [names]}}``; calls whose parameter
    is not an input with a relation are left out (the rule refuses them)."""
    classes: dict = {}
    for graph in p.dist.graphs:
        for node in graph.nodes:
            if node.op != tc.UPDATE:
                continue
            param, key = node.args[0], node.args[3]
            b = p.bindings.get(param.name) if getattr(param, "op", None) == "input" else None
            dtype = node.type.dtype
            if b is None or dtype not in _DTYPES:
                continue
            shape = tuple(p.seq.node(b.seq_name).type.shape)
            entry = classes.setdefault((key, shape, dtype, str(b.relation)), {
                "key": key, "shape": shape, "dtype": dtype, "relation": b.relation, "params": []})
            if b.seq_name not in entry["params"]:
                entry["params"].append(b.seq_name)
    return classes


def _layouts(relation, shape, world):
    vecs = [relation.layout(shape, r, world) for r in range(world)]
    return None if any(v is None for v in vecs) else vecs


def _select(t, vecs):
    import torch
    index = [torch.arange(n) if v is None else torch.as_tensor(np.asarray(v, dtype=np.int64))
             for v, n in zip(vecs, t.shape)]
    return t[np.ix_(*index)] if index else t


def _class_case(classes: list, world: int):
    """One program updating one representative of every class: single device whole tensors,
    rank r the selection its class's relation gives rank r."""
    import torch
    from torch import nn
    from .case import Case
    from .frontends.torch_tail_calls import OPTIMIZERS
    from .frontends.torch_train import plain_update

    class Updates(nn.Module):
        def forward(self, **inputs):
            out = {}
            for k, c in enumerate(classes):
                opt = OPTIMIZERS[c["key"]]
                state = {s: inputs[f"{s}{k}"] for s in opt.state_names}
                out[f"out{k}"] = plain_update(inputs[f"p{k}"], inputs[f"g{k}"], state, opt)
            return out
    gen = torch.Generator().manual_seed(0)
    inputs, layouts = {}, {}
    for k, c in enumerate(classes):
        dtype = getattr(torch, _DTYPES[c["dtype"]])
        c["inputs"] = [f"p{k}", f"g{k}"] + [f"{s}{k}" for s in OPTIMIZERS[c["key"]].state_names]
        for name in c["inputs"]:  # positive values: the second moment's square root is real
            inputs[name] = (torch.rand(c["shape"], generator=gen, dtype=torch.float64) + 0.5).to(dtype)
            layouts[name] = c["layouts"]

    def dist_inputs(rank, w, data):
        return {n: _select(t, layouts[n][rank]) for n, t in data.items()}
    program = Updates()
    return Case(single=program, distributed=lambda rank, w: program, inputs=inputs, world_size=world,
                dist_inputs=dist_inputs, name="optimizer update classes",
                meta={"source": "step tail: one parameter update per class"}), layouts


def _same(vecs_a, vecs_b, shape) -> bool:
    return vecs_a is not None and tc.selection(vecs_a, shape) == tc.selection(vecs_b, shape)


def prove_classes(classes: dict, world: int) -> list[dict]:
    """Prove every class at once (see the module docstring); admit the proved ones to the
    rule's table. Returns one summary per class (``proved`` true or false)."""
    from .api import NO_CONFIRM, prepare, verify_prepared
    from .frontends.torch_tail_calls import OPTIMIZERS
    from .frontends.torch_train import plain_update
    from .relations.spec import parse_relation
    for c in classes.values():
        c["layouts"], c["proved"] = _layouts(c["relation"], c["shape"], world), False
    todo = [c for c in classes.values() if c["layouts"] is not None]
    if todo:
        case, _ = _class_case(todo, world)
        p = prepare(case, world)
        report = verify_prepared(p, confirm_draws=NO_CONFIRM, fixes=False)
        holds = {o.name: o.holds for o in report.outputs if o.holds}
        for k, c in enumerate(todo):
            shape, layouts = c["shape"], c["layouts"]
            assumed = all(_same(p.bindings[n].relation.layout(shape, r, world), layouts[r], shape)
                          for n in c["inputs"] for r in range(world))  # the proof's inputs: the class's layout
            out = parse_relation(holds[f"out{k}"]) if assumed and f"out{k}" in holds else None
            if out is None or not all(_same(out.layout(shape, r, world), layouts[r], shape) for r in range(world)):
                continue
            c["proved"] = True
            opt = OPTIMIZERS[c["key"]]
            tc.KERNELS[c["key"]] = (lambda opt: lambda pa, g, s: plain_update(pa, g, dict(zip(
                opt.state_names, s)), opt))(opt)
            for r in range(world):
                tc.PROVED.add(tc.class_of(c["key"], shape, c["dtype"], tc.selection(layouts[r], shape)))
    return [{"optimizer": c["key"], "shape": list(c["shape"]), "layout": str(c["relation"]),
             "parameters": len(c["params"]), "proved": c["proved"]} for c in classes.values()]


@contextlib.contextmanager
def proved_updates():
    """The rule's tables are filled only within this context (one step's proof)."""
    try:
        yield
    finally:
        tc.PROVED.clear()
        tc.KERNELS.clear()
