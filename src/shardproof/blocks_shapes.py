"""Block contracts proved at real model sizes without values (issue 16), and confirmed by
execution at reduced widths with the same structure.

At a 405B model's sizes the tensors cannot hold values here (one 16384 x 53248 weight is
3.5 GB), so a layer stack is built on fake tensors (``FakeTensorMode``: shapes, dtypes and
strides only). Two things in :func:`~shardproof.blocks.verify_blocks` need values, and are
replaced here:

- *relating the inputs.* Instead of matching each rank's weights to the single-device ones
  by value, every input's relation is **stated** (``relations``: name -> relation, the plan's
  own statement of how each rank's parameter is sliced, e.g. ``"block.wq.weight":
  "Shard(0)"``); an input no relation names is an error, never guessed. The engine itself
  needs no values: it proves the contract symbolically from the stated relations and the
  graphs' shapes (input-independent tables, a causal mask or a RoPE table, are evaluated
  from shapes).
- *confirmation by execution.* The same stack is built at reduced widths (the same heads, KV
  heads, tensor-parallel size and code: only the head dimension and the FFN width shrink) and
  verified there with values by ``verify_blocks``: the *same stated relations* are checked
  against the values (a stated slice that is not the one the ranks hold is refused there),
  each distinct block is proved and run on a gloo group. Then the real block and the reduced
  one must be the same program modulo sizes, which is **checked, not assumed**: the same
  partition of the layers into classes, for each class equal graph structure (ops, dataflow,
  dtypes, group names; sizes and numeric constants erased: ``engine/blocks.structure_key``),
  equal input relations, equal proved output relations, and the same relation proved at every
  node of every graph with sizes erased (``proof_signature``).

The verdict is ``verified`` only when the real-size proof holds, the reduced stack is
verified (proved and confirmed by execution) and the match holds; the report says so
(``blocks["shapes"]``, and the confirmation's detail: "at reduced widths"). Otherwise the
stack's verdict is the real-size proof's (a violation is located at its layer at the real
sizes), or unknown "proved at real shapes; not confirmed: ..." naming what did not match.

Per-layer screening at the real sizes is :func:`~shardproof.blocks.screen_block`'s without
the values: every layer's block run on the single device and every rank (fake tensors, fake
process group) with its dispatched ATen ops recorded, plus its stated relations. What this
cannot see at the real sizes: a rank whose weight is loaded from the wrong slice by the same
code (the graphs are equal; only values tell): the stated relations are checked by values at
the reduced widths, where the same construction code runs."""
from __future__ import annotations

import contextlib
import hashlib
import re
import time
from dataclasses import replace

from .api import NO_CONFIRM, Prepared, training_expectations, verify_prepared
from .blocks import _case, rank_builders, stack_contracts
from .engine import blocks as eb
from .engine.next_step import for_unconfirmed
from .engine.result import Confirmation
from .frontends.torch_blocks import GRAD, dispatch_text, screening
from .ir.graph import DistributedProgram
from .relations.infer import parse_spec, resolve_inputs
from .relations.spec import RelationError, parse_relation


def _stated(relations: dict) -> dict:
    return {k: str(parse_relation(v)) for k, v in relations.items()}


def prepare_stated(single, parallel_of_rank, x, g, world: int, name: str, relations: dict, mode=None) -> Prepared:
    """One layer's block captured on whatever tensors it holds (fake ones: no values) with
    every input's relation as stated (no value matching; an input not named is an error).
    `mode`: the fake mode the ranks' blocks are built in."""
    from .api import TEMPORAL
    from .frontends import torch_capture as tc
    within = mode if mode is not None else contextlib.nullcontext()

    def of_rank(rank, w):
        with within:
            return parallel_of_rank(rank, w)
    case = _case(single, of_rank, x, g, world, name, relations)
    seq = tc.capture_single(case.single, case.inputs)
    graphs = [tc.capture_rank(case.distributed, r, world, case.inputs, events=TEMPORAL)[0] for r in range(world)]
    bindings = resolve_inputs({n.name: n.shape for n in seq.inputs}, [{n.name: n.shape for n in gr.inputs}
                              for gr in graphs], parse_spec(case.relations, source=f"relations of {name}"))
    dist, grads = training_expectations(seq, DistributedProgram(graphs), bindings)
    expect = {**grads, **{k: parse_relation(v) for k, v in case.expect.items()}}
    return Prepared(seq, dist, bindings, expect, {}, name, frozenset(n for n in seq.outputs if n.startswith(GRAD)))


def screen_stated(single, parallel_of_rank, x, g, world: int, relations: dict, mode=None) -> str:
    """A layer's key at any size (no values): its dispatched ops on the single device and
    every rank, and its stated relations. Runs inside :func:`screening` (and `mode`)."""
    from .frontends.torch_capture import fake_world
    from .frontends.torch_blocks import BlockVJP
    within = mode if mode is not None else contextlib.nullcontext()
    data = {"x": x, "g": g}
    with within:
        texts = [dispatch_text(BlockVJP(single), data)]
        for rank in range(world):
            with fake_world(rank, world):
                texts.append(dispatch_text(BlockVJP(parallel_of_rank(rank, world)), data))
    h = hashlib.sha256("\0".join(texts).encode())
    h.update(repr(sorted(relations.items())).encode())
    return h.hexdigest()[:16]


_NUMBER = re.compile(r"\d+")


def proof_signature(report) -> list:
    """What the engine proved at every node of every graph (``report.graphs``, a proof run
    with views), sizes erased: per node, its op, its status and its relation's description
    with every number replaced (``x[0:2048, :]`` and ``x[0:2, :]`` read alike)."""
    return [[(n.op, n.status, _NUMBER.sub("#", n.relation)) for n in view.nodes] for view in report.graphs or []]


def _prove_real(single_layers, parallel, x, g, world, name, relations, mode):
    """The stack at the real sizes: screened per layer, each class's first layer proved."""
    of_rank = rank_builders(single_layers, parallel)
    with screening():
        order = [screen_stated(single, of_rank[i], x, g, world, relations, mode)
                 for i, single in enumerate(single_layers)]
    contracts, signatures = {}, {}
    for key in dict.fromkeys(order):
        first = order.index(key)
        p = prepare_stated(single_layers[first], of_rank[first], x, g, world, f"{name} layer {first}", relations, mode)
        report = verify_prepared(p, views=True, confirm_draws=NO_CONFIRM, fixes=False)
        contracts[key] = eb.contract_of(key, [i for i, k in enumerate(order) if k == key], relations, report,
                                        eb.structure_key([p.seq] + p.dist.graphs))
        signatures[key] = proof_signature(report)
        report.graphs = None  # the views served the match; the report stays small
    return order, contracts, signatures


def match_reduced(real: dict, real_signatures: dict, reduced: dict) -> list[str]:
    """Why the reduced stack (its contracts, proved with views) is not the real one modulo
    sizes (empty: it is): the same classes of layers, and per class the same structure,
    input relations, proved output relations and per-node proofs with sizes erased."""
    if sorted(c.layers for c in real.values()) != sorted(c.layers for c in reduced.values()):
        return [f"the layers fall into {len(reduced)} classes at the reduced widths and {len(real)} at the real sizes"]
    why = []
    by_first = {c.layers[0]: c for c in reduced.values()}
    for key, c in real.items():
        red, where = by_first[c.layers[0]], f"layer {c.layers[0]}"
        if red.structure != c.structure:
            why.append(f"{where}: the graphs' structure differs between the reduced and the real sizes")
        elif red.inputs != c.inputs or {k: str(v) for k, v in red.outputs.items()} != {k: str(v) for k, v in
                                                                                    c.outputs.items()}:
            why.append(f"{where}: the input or proved output relations differ between the reduced and the real sizes")
        elif proof_signature(red.report) != real_signatures[key]:
            why.append(f"{where}: the relation proved at some node differs between the reduced and the real sizes")
    return why


def _proved(contracts: dict) -> bool:
    """Every distinct block's proof holds (run without confirmation: 'proved, but not confirmed')."""
    return all(c.report.status == "verified" or (c.report.status == "unknown" and c.report.reason.startswith("proved"))
               for c in contracts.values())


def verify_blocks_at_shapes(real_layers: list, reduced_layers: list, parallel, real_data: tuple, reduced_data: tuple,
                            world: int, relations: dict, name: str = "stack", mode=None,
                            confirm_draws: int | None = None, sizes: tuple[str, str] = ("real", "reduced")):
    """The stack proved at the real sizes (`real_layers` and `real_data` = (x, g), fake
    tensors built in `mode`) from the stated `relations` (every input of a block, ``x`` and
    ``g`` included), and confirmed by execution at the reduced widths (`reduced_layers`,
    `reduced_data`: real tensors) after checking that both are the same program modulo
    sizes (module docstring). `sizes` describe the two sizes for the report."""
    t0 = time.perf_counter()
    relations = _stated(relations)
    links = {k: relations[k] for k in eb.LINKS}
    order, contracts, signatures = _prove_real(real_layers, parallel, *real_data, world, name, relations, mode)
    report = eb.combine(order, contracts, links, name)
    shapes = {"proved": sizes[0], "confirmed": sizes[1], "real_seconds": round(time.perf_counter() - t0, 3)}
    if not _proved(contracts) or report.reason.startswith("block contracts do not chain"):
        shapes.update(matched=False, statement=f"{report.status} at real shapes ({sizes[0]}) from stated relations")
    else:  # the real-size proof holds: confirm at the reduced widths, on the same program modulo sizes
        try:
            red_order, reduced = stack_contracts(reduced_layers, parallel, *reduced_data, world,
                                                 f"{name} (reduced widths)", relations, confirm_draws, views=True)
        except RelationError as exc:  # a stated relation the reduced stack's values contradict
            red, reduced, why = None, {}, [f"the stated relations do not hold at reduced widths: {exc}"]
        else:
            red = eb.combine(red_order, reduced, links)
            shapes["reduced_summary"] = red.blocks["summary"]
            why = match_reduced(contracts, signatures, reduced) if red.status == "verified" else [
                f"the reduced stack is {red.status}" + (f": {red.reason}" if red.reason else "")]
        shapes["matched"] = not why
        conf = red.confirmation if red is not None and not why else None
        if not why and conf is not None and conf.outcome == "confirmed":
            report.status, report.strength, report.reason = "verified", red.strength, ""
            report.confirmation = replace(conf, detail=(f"at reduced widths ({sizes[1]}), on the same program modulo "
                                                        f"sizes: equal classes of layers, graph structure and relation "
                                                        f"proofs at every node"))
            shapes["statement"] = (f"proved at real shapes ({sizes[0]}) from stated relations; confirmed by execution "
                                   f"at reduced widths ({sizes[1]}), the same program modulo sizes")
        else:
            report.status, report.strength = "unknown", None
            report.confirmation = Confirmation("gloo", 0, "skipped",
                                               "; ".join(why) or "not confirmed at reduced widths")
            report.reason = (f"proved at real shapes; not confirmed: {report.confirmation.detail}; "
                             f"{for_unconfirmed(report.confirmation.detail)}")
            shapes["statement"] = report.reason
    report.blocks = dict(report.blocks, shapes=shapes)
    report.stats["wall_seconds"] = round(time.perf_counter() - t0, 4)
    return report
