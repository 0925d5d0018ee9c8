"""Verify a stack of layers by block contracts (issue 16): each layer's forward and backward
is captured as a program of its own (:class:`~shardproof.frontends.torch_blocks.BlockVJP`),
layers whose programs and input relations are identical share one contract, each distinct
contract is proved once by the engine (and confirmed by execution, as any proof), and the
contracts are chained (:mod:`shardproof.engine.blocks`, where the argument for soundness is).

    report = verify_blocks(single_layers, parallel, x, g, world)

``parallel(layer, single_block, rank, world)`` builds rank `rank`'s block of layer `layer`
from the single-device one. Contracts are per tensor-parallel group: `world` is the group's
size, and the relations of ``x`` and ``g`` (default: both replicated, as Megatron's blocks
take and give them) are stated of one such group."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from .api import prepare, training_expectations, verify_prepared
from .engine import blocks as eb
from .frontends.torch_blocks import GRAD, block_case
from .relations.spec import parse_relation

REPLICATED = {"x": "Replicate()", "g": "Replicate()"}


def prepare_block(single, parallel_of_rank: Callable, x, g, world: int, name: str, inputs: dict):
    """One layer's block captured and related: the Prepared, its structural key."""
    case = block_case(single, parallel_of_rank, x, g, world, name)
    case.relations = dict(inputs)
    case.expect = {eb.LINKS[k]: rel for k, rel in inputs.items()}
    p = prepare(case, world)
    dist, grads = training_expectations(p.seq, p.dist, p.bindings)  # a parameter's gradient relates as it does
    p = replace(p, dist=dist, expect={**grads, **p.expect},
                gradients=frozenset(n for n in p.seq.outputs if n.startswith(GRAD)))
    return p, eb.program_key(p.seq, p.dist.graphs, p.bindings)


def verify_blocks(single_layers: list, parallel: Callable, x, g, world: int, name: str = "stack",
                  inputs: dict | None = None, confirm_draws: int | None = None, fixes: bool = False):
    """The stack's report (``report.blocks`` says how many layers, how many distinct blocks,
    which layer holds which contract); a finding's ``layer`` is where it is."""
    t0 = time.perf_counter()
    inputs = {k: str(parse_relation(v)) for k, v in (inputs or REPLICATED).items()}
    order, contracts, prepared = [], {}, {}
    for i, single in enumerate(single_layers):
        p, key = prepare_block(single, lambda r, w, i=i, s=single: parallel(i, s, r, w), x, g, world,
                               f"{name} layer {i}", inputs)
        order.append(key)
        if key not in prepared:
            prepared[key] = (i, p)
    for key, (first, p) in prepared.items():
        report = verify_prepared(p, confirm_draws=confirm_draws, fixes=fixes)
        contracts[key] = eb.contract_of(key, [i for i, k in enumerate(order) if k == key], inputs, report,
                                        eb.structure_key([p.seq] + p.dist.graphs))
    report = eb.combine(order, contracts, inputs, name)
    report.stats["wall_seconds"] = round(time.perf_counter() - t0, 4)
    return report
