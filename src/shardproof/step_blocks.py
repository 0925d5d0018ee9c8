"""The whole training step with its layer stack replaced by chained block contracts
(issue 16: sub-linear in the layers N).

    report = verify_step(case)                # case: a training step (Case with train=...)

1. **Screen** every layer of the step as :func:`shardproof.blocks.screen_block` does (each rank's
   model built once for all layers: :func:`shardproof.blocks.screen_layers`), with the
   step's own rank modules (``layers_of(case.distributed(rank, world))[i]``) at the step's
   world: layers with equal dispatched ops and input relations on the single device and on
   every rank form one class.
2. **Prove once per class**: the block contract (the layer's forward and backward, its input
   ``x`` and output gradient ``g`` replicated on every rank: the relations the engine proves of
   ``y``, ``grad_x`` and every parameter gradient), and the layer's *row-locality* (the
   single-device layer on the whole batch against the same layer on each per-rank microbatch
   piece of rows: outputs Shard(0), parameter gradients Partial("sum")). A class whose contract
   is violated gives the step's verdict, located at its first layer (``finding.layer``).
3. **Prove the step's tail once** (head, loss, microbatch accumulation, dp gradient reduction,
   clipping, the optimizer, for every parameter): the step captured with each layer one opaque
   call (:mod:`shardproof.frontends.torch_block_calls`) whose meaning is its class's contract
   (:mod:`shardproof.ops.block_calls`, where the soundness argument is). A layer's parameter
   updates follow from its contract's gradient relations through the traced tail; each
   parameter's optimizer update is itself one opaque call, proved once per class of equal
   hyperparameters, shape, dtype and layout (:mod:`shardproof.step_tail`), and the opaque
   step's dp replicas are one rank class (traced once).
4. A proved step is confirmed by running the **real** step (the case, not the opaque one) on
   gloo, as any proof. Whenever the tail cannot be combined with the contracts (a rule that
   does not apply, a class proved only unknown, a contract that does not hold), the step is
   verified by today's full trace instead (``report.blocks["fallback"]`` says why): never
   "verified" on a guess."""
from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import Callable

from .api import NO_CONFIRM, prepare, verify_prepared
from .blocks import REPLICATED, prepare_block, screen_layers
from .engine import blocks as eb
from .frontends.torch_blocks import GRAD, block_case, screening
from .frontends.torch_block_calls import RANK, SINGLE, layer_tensors, make_opaque, opaque_layers, tp_group_ranks
from .ops import block_calls as bc
from .frontends.torch_tail_calls import opaque_updates
from .relations.spec import Partial, RelationError, parse_relation
from .step_tail import proved_updates, prove_classes, update_classes

__all__ = ["verify_step"]

TAIL_UPDATES = True
"""Each parameter's optimizer update one opaque call proved once per class (step_tail.py);
False: the updates traced op by op (before)."""


def _proved(report) -> bool:
    return report.status == "verified" or (report.status == "unknown" and
                                           (report.reason or "").startswith("proved, but not confirmed"))


def _rank_layer(case, layers_of, i):
    return lambda rank, world: layers_of(case.distributed(rank, world))[i]


def locality_case(single_layer, x_whole, g_whole, pieces: int, name: str):
    """The single-device layer on the whole batch against the same layer on each of `pieces`
    row pieces: y and grad_x Shard(0), every parameter gradient Partial("sum")."""
    case = block_case(single_layer, lambda rank, world: single_layer, x_whole, g_whole, pieces, name,
                      dist_inputs=lambda rank, world, data: {k: v.chunk(world, 0)[rank] for k, v in data.items()})
    case.relations = {"x": "Shard(0)", "g": "Shard(0)"}
    case.expect = {"y": "Shard(0)", "grad_x": "Shard(0)",
                   **{f"{GRAD}{n}": 'Partial("sum")' for n, _ in layer_tensors(single_layer)[:_params(single_layer)]}}
    return case


def _params(layer) -> int:
    return len(list(layer.parameters()))


def _contract(p, report, names, shapes, params, world, batch, rows) -> bc.CallContract:
    """The table entry the opaque calls' rule reads: layouts from the proof's input bindings
    and the relations it proved of the outputs."""
    rel_in = {n: p.bindings[n].relation for n in ["x", "g", *names]}
    rel_out = {o.name: parse_relation(o.holds) for o in report.outputs if o.holds}
    shape_of = dict(zip(names, shapes))
    whole = {"x": tuple(p.seq.node("x").shape), "g": tuple(p.seq.node("g").shape)}
    for n, r in rel_in.items():
        if p.bindings[n].seq_name != n or isinstance(r, Partial) or \
                any(r.layout(whole.get(n) or shape_of[n], rank, world) is None for rank in range(world)):
            raise ValueError(f"{n}: a relation the opaque call cannot state ({r})")
    out_shape = {"y": whole["x"], "grad_x": whole["x"], **{f"{GRAD}{n}": s for n, s in shape_of.items()}}

    def holds_in(name, rank):
        return rel_in[name].layout(whole.get(name) or shape_of[name], rank, world)

    def holds_out(name, rank):
        rel = rel_out.get(name)
        vecs = None if rel is None or isinstance(rel, Partial) else rel.layout(out_shape[name], rank, world)
        if vecs is None:
            raise bc.NotCovered(f"the contract proved no layout of {name}")
        return vecs
    return bc.CallContract(list(names), [tuple(s) for s in shapes], params, holds_in, holds_out, world, batch, rows)


def _full_trace(case, why: str, confirm_draws, fixes, blocks: dict | None = None, layers: int = 1):
    """Today's full trace of the step; ``report.blocks`` says why (and what the contracts found)."""
    report = verify_prepared(prepare(case, case.world_size), confirm_draws=confirm_draws, fixes=fixes)
    n = max(layers, 1)
    report.blocks = dict(blocks or {"count": n, "distinct": n, "proofs": 0, "summary": f"{n} blocks, not screened",
                                    "layers": list(range(n)), "contracts": []}, fallback=why)
    return report


def verify_step(case, layers_of: Callable = lambda model: list(model.layers), group_of: Callable = tp_group_ranks,
                confirm_draws: int | None = None, fixes: bool = False, data: str = "x"):
    """The step's report (see the module docstring). `layers_of(model)`: the model's layers in
    call order; `group_of(rank layer)`: the global ranks its collectives use; `data`: the
    step input the first layer takes (its rows are the batch)."""
    import torch
    t0 = time.perf_counter()
    world = case.world_size
    single_layers = layers_of(case.single)
    batch = case.inputs[data]
    if case.train is None:
        raise ValueError("verify_step verifies a training step (a Case with train=...); use blocks.verify_blocks "
                         "for a layer stack")
    try:
        pieces = (world // len(_group(case, layers_of, group_of))) * (case.train.microbatches or 1)
    except Exception as exc:  # noqa: BLE001  (no layers, no tp group to find): the full trace decides
        return _full_trace(case, f"the layers or their group could not be found: {type(exc).__name__}: {exc}",
                           confirm_draws, fixes, layers=len(single_layers))
    if batch.shape[0] % pieces:
        return _full_trace(case, f"{batch.shape[0]} rows do not split into {pieces} microbatch pieces", confirm_draws,
                           fixes, layers=len(single_layers))
    rows = batch.shape[0] // pieces
    gen = torch.Generator().manual_seed(0)
    x = torch.randn((rows,) + tuple(batch.shape[1:]), generator=gen)
    g = torch.randn((rows,) + tuple(batch.shape[1:]), generator=gen)
    inputs = dict(REPLICATED)
    of_rank = [_rank_layer(case, layers_of, i) for i in range(len(single_layers))]
    name = case.name or "step"
    try:
        with screening():  # each rank's model built once for all its layers
            order = screen_layers(single_layers, lambda rank, w: layers_of(case.distributed(rank, w)), x, g, world,
                                  name, inputs)
    except RelationError as exc:  # a rank layer holding no piece of its own block's weights: the full trace decides
        return _full_trace(case, f"a layer's inputs could not be related: {exc}", confirm_draws, fixes,
                           layers=len(single_layers))
    t_screen = time.perf_counter()
    contracts, table = {}, {}
    for i, key in enumerate(order):
        if key in contracts:
            continue
        layer = single_layers[i]
        p = prepare_block(layer, of_rank[i], x, g, world, f"{name} layer {i}", inputs)
        report = verify_prepared(p, confirm_draws=NO_CONFIRM, fixes=fixes)  # the real step is confirmed instead
        contracts[key] = eb.contract_of(key, [j for j, k in enumerate(order) if k == key], inputs, report)
        if not _proved(report):
            continue
        whole = (batch.shape[0],) + tuple(batch.shape[1:])
        local = locality_case(layer, torch.randn(whole, generator=gen), torch.randn(whole, generator=gen), pieces,
                              f"{name} layer {i} rows")
        loc = verify_prepared(prepare(local, pieces), confirm_draws=NO_CONFIRM, fixes=False)
        if not _proved(loc):
            contracts[key].report = replace(report, status="unknown", reason=f"row-locality not proved: {loc.reason}")
            continue
        named = layer_tensors(layer)
        try:
            table[key] = _contract(p, report, [n for n, _ in named], [tuple(t.shape) for _, t in named],
                                   _params(layer), world, batch.shape[0], rows)
        except ValueError as exc:
            contracts[key].report = replace(report, status="unknown", reason=str(exc))
    stack = eb.combine(order, contracts, inputs, name)
    blocks = dict(stack.blocks)
    if stack.status == "violation":  # a layer's own program is wrong: located at its layer
        stack.stats["wall_seconds"] = round(time.perf_counter() - t0, 4)
        return stack
    if len(table) != len(contracts):
        return _full_trace(case, f"a block contract is not proved ({stack.reason})", confirm_draws, fixes, blocks)
    t_contracts = time.perf_counter()
    try:
        report, updates = _tail(case, order, table, layers_of, group_of, confirm_draws, fixes)
    except Exception as exc:  # noqa: BLE001  (e.g. a layer called with more than one input): the full trace decides
        return _full_trace(case, f"the tail could not be captured with opaque layers: {type(exc).__name__}: {exc}",
                           confirm_draws, fixes, blocks)
    if not _proved(report):
        return _full_trace(case, f"the tail with the contracts is {report.status}: {report.reason}", confirm_draws,
                           fixes, blocks)
    report.blocks = dict(blocks, tail=f"step tail proved once with {len(order)} opaque layer calls" + (
        f" and {sum(u['parameters'] for u in updates)} opaque parameter updates in {len(updates)} classes"
        f" ({sum(u['proved'] for u in updates)} proved)"
        if updates else ""), **({"updates": updates} if updates else {}))
    end = time.perf_counter()
    report.stats.update(wall_seconds=round(end - t0, 4), screen_seconds=round(t_screen - t0, 4),
                        contract_seconds=round(t_contracts - t_screen, 4), tail_seconds=round(end - t_contracts, 4))
    return report


def _group(case, layers_of, group_of):
    from .frontends.torch_capture import fake_world
    with fake_world(0, case.world_size):
        return group_of(layers_of(case.distributed(0, case.world_size))[0])


def _tail(case, order, table, layers_of, group_of, confirm_draws, fixes):
    """The step captured with every layer an opaque call, proved with the contracts' table,
    and confirmed by running the real step."""
    def distributed(rank, world):
        model = case.distributed(rank, world)
        make_opaque(layers_of(model), order, RANK, group_of)
        return model
    opaque = replace(case, distributed=distributed)
    bc.CONTRACTS.update(table)
    try:
        with opaque_layers(layers_of(case.single), order, SINGLE, lambda layer: [0]), \
                opaque_updates() if TAIL_UPDATES else contextlib.nullcontext():
            p = prepare(opaque, case.world_size)
        with proved_updates():
            updates = prove_classes(update_classes(p), case.world_size) if TAIL_UPDATES else []
            # confirmation by execution runs p.case: the real step, not the opaque one
            report = verify_prepared(replace(p, case=case), confirm_draws=confirm_draws, fixes=fixes)
        return report, updates
    finally:
        for key in table:
            bc.CONTRACTS.pop(key, None)
