"""Verify a stack of layers by block contracts (issue 16): each layer's forward and backward
is a program of its own (:class:`~shardproof.frontends.torch_blocks.BlockVJP`); layers whose
programs and input relations are identical share one contract, each distinct contract is
captured and proved once by the engine (and confirmed by execution, as any proof), and the
contracts are chained (:mod:`shardproof.engine.blocks`, where the argument for soundness is).

Which layers are identical is decided cheaply and exactly (:func:`screen_block`): every
layer's block is run once on the single device and on every rank (fake process group,
collectives routed as during capture) and the ATen ops it dispatches are recorded with
their operands' shapes, dtypes, strides and offsets (``dispatch_text``); its inputs are
related by value matching exactly as :func:`~shardproof.api.prepare` would (the same redraw,
the same values, the same ``resolve_inputs``). ``make_fx``'s graph is a deterministic
function of that op stream (functionalization and decompositions see nothing else), so
layers with equal records and equal input relations have equal captured graphs and equal
bindings: the representative's capture and proof stand for all of them. Only the first
layer of each class is captured with ``make_fx`` and proved.

    report = verify_blocks(single_layers, parallel, x, g, world)

``parallel(layer, single_block, rank, world)`` builds rank `rank`'s block of layer `layer`
from the single-device one. Contracts are per tensor-parallel group: `world` is the group's
size, and the relations of ``x`` and ``g`` (default: both replicated, as Megatron's blocks
take and give them) are stated of one such group.

Composition with the other scaling parts of issue 16: a contract is per tensor-parallel rank
class (one group of `world` ranks; every dp replica of that group runs the same block
programs on its own data, so dp symmetry can reuse it as is), it holds for all input values
(so it holds for every microbatch an induction over microbatches feeds it), and the distinct
blocks' proofs are independent of each other (an executor may run them in parallel). What it
does not cover: the rest of a training step (loss, accumulation, the dp gradient reduction,
clipping, the optimizer) is not composed with the contracts here (``step_blocks.verify_step`` does)."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import hashlib

from .api import REDRAW_SEED, _numpy, prepare, training_expectations, verify_prepared
from .engine import blocks as eb
from .frontends.torch_blocks import GRAD, BlockVJP, block_case, dispatch_text, screening
from .relations.infer import parse_spec, resolve_inputs
from .relations.spec import parse_relation

REPLICATED = {"x": "Replicate()", "g": "Replicate()"}


def _case(single, parallel_of_rank: Callable, x, g, world: int, name: str, inputs: dict):
    case = block_case(single, parallel_of_rank, x, g, world, name)
    case.relations = dict(inputs)
    case.expect = {eb.LINKS[k]: rel for k, rel in inputs.items() if k in eb.LINKS}  # x, g: y, grad_x
    return case


def screen_block(single, parallel_of_rank: Callable, x, g, world: int, name: str, inputs: dict) -> str:
    """One layer's key: its dispatched ops on the single device and every rank, and its input
    relations as :func:`~shardproof.api.prepare` would infer them (see the module docstring):
    :func:`screen_layers` of one layer. Runs inside
    :func:`~shardproof.frontends.torch_blocks.screening`."""
    return screen_layers([single], lambda rank, w: [parallel_of_rank(rank, w)], x, g, world, name, inputs,
                         names=[name])[0]


def screen_layers(single_layers: list, rank_layers: Callable, x, g, world: int, name: str, inputs: dict,
                  names: list | None = None) -> list:
    """Every layer's :func:`screen_block` key, with each rank's model built **once** for all
    layers (``rank_layers(rank, world)``: the layers of rank `rank`'s model, built from the
    single-device layers as they are at the call) instead of once per layer (issue 16: building
    a whole N-layer model per layer was quadratic in N). Layer ``i`` is redrawn with the seed
    ``REDRAW_SEED + i`` (distinct values in every layer, so a rank layer that holds another
    layer's weights relates to no input of its own block, as when only its own layer was
    redrawn), all layers before any rank model is built; each layer's record is then exactly
    what :func:`screen_block` records of it. Runs inside
    :func:`~shardproof.frontends.torch_blocks.screening`."""
    from .frontends import torch_draws as draws
    from .frontends.torch_capture import fake_world, program_inputs
    names = names or [f"{name} layer {i}" for i in range(len(single_layers))]
    cases = [_case(layer, None, x, g, world, names[i], inputs) for i, layer in enumerate(single_layers)]
    saved = [draws.snapshot(c.single) for c in cases]
    try:
        for i, c in enumerate(cases):
            draws.redraw(c.single, REDRAW_SEED + i)
        texts = [[dispatch_text(c.single, c.inputs)] for c in cases]
        seq_values = [_numpy(program_inputs(c.single, c.inputs)) for c in cases]
        rank_values: list = [[] for _ in cases]
        for rank in range(world):
            with fake_world(rank, world):
                layers = rank_layers(rank, world)
                for i, c in enumerate(cases):
                    program = BlockVJP(layers[i])
                    texts[i].append(dispatch_text(program, c.inputs))
                    rank_values[i].append(_numpy(program_inputs(program, c.inputs)))
    finally:
        for c, snap in zip(reversed(cases), reversed(saved)):
            draws.restore(c.single, snap)
    return [_key(c, saved[i], texts[i], seq_values[i], rank_values[i]) for i, c in enumerate(cases)]


def _key(case, saved: dict, texts: list, seq_values: dict, rank_values: list) -> str:
    """The screening key: the dispatch records and the inputs' relations resolved by value."""
    from .frontends.torch_capture import program_inputs
    original = {k: v for k, v in _numpy(program_inputs(case.single, {})).items() if k in seq_values} if saved else {}
    bindings = resolve_inputs({k: v.shape for k, v in seq_values.items()}, [{k: v.shape for k, v in r.items()}
                              for r in rank_values], parse_spec(case.relations), seq_values, rank_values,
                              original_values=original or None)
    h = hashlib.sha256("\0".join(texts).encode())
    for key in sorted(bindings):
        b = bindings[key]
        h.update(repr((key, b.seq_name, str(b.relation), b.how)).encode())
    return h.hexdigest()[:16]


def prepare_block(single, parallel_of_rank: Callable, x, g, world: int, name: str, inputs: dict):
    """One layer's block captured and related, with the contract's expectations: its Prepared."""
    case = _case(single, parallel_of_rank, x, g, world, name, inputs)
    p = prepare(case, world)
    dist, grads = training_expectations(p.seq, p.dist, p.bindings)  # a parameter's gradient relates as it does
    p = replace(p, dist=dist, expect={**grads, **p.expect},
                gradients=frozenset(n for n in p.seq.outputs if n.startswith(GRAD)))
    return p


def verify_blocks(single_layers: list, parallel: Callable, x, g, world: int, name: str = "stack",
                  inputs: dict | None = None, confirm_draws: int | None = None, fixes: bool = False):
    """The stack's report (``report.blocks`` says how many layers, how many distinct blocks,
    which layer holds which contract); a finding's ``layer`` is where it is. `inputs`: the
    relations of ``x`` and ``g`` (default: replicated), and of any block input they name
    (stated relations are checked against the values)."""
    t0 = time.perf_counter()
    inputs = {k: str(parse_relation(v)) for k, v in (inputs or REPLICATED).items()}
    order, contracts = stack_contracts(single_layers, parallel, x, g, world, name, inputs, confirm_draws, fixes)
    report = eb.combine(order, contracts, {k: v for k, v in inputs.items() if k in eb.LINKS}, name)
    report.stats["wall_seconds"] = round(time.perf_counter() - t0, 4)
    return report


def rank_builders(single_layers: list, parallel: Callable) -> list:
    """Per layer, ``(rank, world) -> that rank's block`` (``parallel(layer, single, rank, world)``)."""
    return [(lambda r, w, i=i, s=single: parallel(i, s, r, w)) for i, single in enumerate(single_layers)]


def stack_contracts(single_layers: list, parallel: Callable, x, g, world: int, name: str, inputs: dict,
                    confirm_draws: int | None = None, fixes: bool = False, views: bool = False):
    """Each layer's contract key (in layer order) and the distinct contracts, each proved
    (and confirmed) once; with `views` each contract's report keeps its per-node views."""
    of_rank = rank_builders(single_layers, parallel)
    with screening():
        order = [screen_block(single, of_rank[i], x, g, world, f"{name} layer {i}", inputs)
                 for i, single in enumerate(single_layers)]
    contracts, prepared = {}, {}
    for i, key in enumerate(order):
        if key not in prepared:  # the first layer of its class: captured for the proof
            prepared[key] = prepare_block(single_layers[i], of_rank[i], x, g, world, f"{name} layer {i}", inputs)
    for key, p in prepared.items():
        report = verify_prepared(p, views=views, confirm_draws=confirm_draws, fixes=fixes)
        contracts[key] = eb.contract_of(key, [i for i, k in enumerate(order) if k == key], inputs, report,
                                        eb.structure_key([p.seq] + p.dist.graphs))
    return order, contracts
