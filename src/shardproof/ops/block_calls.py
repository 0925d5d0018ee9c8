"""Rules of the opaque layer calls (``shardproof_blocks.fwd`` / ``.bwd``,
:mod:`shardproof.frontends.torch_block_calls`): a layer of a training step whose block
contract is proved (``shardproof.step_blocks``) is one node per call, and its meaning is
the contract.

A call is a collective over the group its layer's collectives use (the single-device
program: a group of one), so the rule sees every member's operands at once. Terms: on the
single device, layer i of contract class k applied to the batch ``X`` (the whole tensor the
operand is a row selection of) and the parameters ``W`` is ``block_call[k, i, y](X, W)``;
its backward at output gradient ``G`` gives ``block_call[k, i, grad_x](X, G, W)`` and, per
parameter, the sum over the batch rows of a per-row contribution term,
``sum_rows(block_call[k, i, rows:<p>](X, G, W))``. On a rank, the rule applies the contract
only when every member's operands hold exactly what the contract assumed (its input
relations, for one and the same ``X``, ``G``, ``W`` on all members) and the rows are the whole
batch or one of the pieces the layer's row-locality proof covers; the outputs then hold what the
contract proved of the same terms (a rank's rows of ``y``/``grad_x``; its rows' share of each
parameter gradient's row sum). Anything else raises: the engine answers unknown, naming the
op, and the step falls back to its full trace.

Why it is sound: the contract (proved by the engine on the layer's own single-device and
rank programs at the step's world, for all values satisfying its input relations) gives a
rank's outputs as the contract's relations of the single-device layer's outputs on the
member's rows; the row-locality proof (the single-device layer on the whole batch against
the same layer on each piece of rows) gives that the layer on a piece of rows is the whole
batch's output on those rows, and that the parameter gradients of the pieces sum to the
whole batch's (so a piece's gradient is a share of the row sum, completed by the sums the
step performs). The tables are set only for the duration of one step's proof."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..algebra.layout import Val, full, same_vec
from .registry import declare

FWD, BWD = "shardproof_blocks.fwd", "shardproof_blocks.bwd"
SINGLE = 0


@dataclass
class CallContract:
    """What the proofs established of one distinct layer class."""
    names: list          # each tensor after x (and g): ``block.<name>``, parameters first
    shapes: list         # their single-device shapes
    params: int          # how many of them are parameters
    holds_in: Callable   # (name, global rank) -> the vecs a rank's operand holds of the whole (dims after rows for x, g)
    holds_out: Callable  # (output name, global rank) -> the vecs a rank's output holds (dims after rows for y, grad_x)
    world: int
    batch: int           # rows of the whole batch the locality proof covers
    rows: int            # rows of each piece it covers


CONTRACTS: dict[str, CallContract] = {}


class NotCovered(ValueError):
    """The operands are not what the contract assumed: the rule does not apply."""


def _rows(c: CallContract, x: Val, shape) -> np.ndarray | None:
    """The batch rows `x` holds (None: all): the whole batch or exactly one of the pieces the
    row-locality proof covers (the layer ran at those two row counts only)."""
    if tuple(shape)[0] != c.batch:
        raise NotCovered(f"the batch holds {shape[0]} rows, the row-locality proof {c.batch}")
    v = x.vecs[0]
    if v is None:
        return None
    v = np.asarray(v, dtype=np.int64)
    start = int(v[0]) if len(v) else -1
    if start % c.rows or not same_vec(v, np.arange(start, start + c.rows, dtype=np.int64)):
        raise NotCovered("the rows are not one of the pieces the row-locality proof covers")
    return v


def _check_operand(terms, c, name, val, rank, side, shape=None):
    if not isinstance(val, Val):
        raise NotCovered(f"{name} is not a tensor value")
    whole = tuple(terms.shape(val.t))
    if shape is not None and whole != tuple(shape):
        raise NotCovered(f"{name} is a piece of a tensor of shape {list(whole)}, the contract's is {list(shape)}")
    want = (None,) * len(whole) if side == SINGLE else c.holds_in(name, rank)
    got = val.vecs if shape is not None else val.vecs[1:]
    want = want if shape is not None else want[1:]
    if len(got) != len(want) or not all(same_vec(a, b) for a, b in zip(got, want)):
        raise NotCovered(f"{name} does not hold what the contract assumes of it")


def _members(ctx, vals, key, side, group, grads: bool):
    c = CONTRACTS.get(key)
    if c is None:
        raise NotCovered(f"no proved contract {key!r}")
    if side != SINGLE and ctx.node is not None and len(group) != len(vals):
        raise NotCovered("the group and its members differ")
    lead = 2 if grads else 1
    first = vals[0]
    for m, ops in enumerate(vals):
        rank = group[m]
        if len(ops) != lead + len(c.names):
            raise NotCovered("the call passes other tensors than the contract's")
        for k, name in enumerate(("x", "g")[:lead]):
            if ops[k].t != first[k].t or not same_vec(ops[k].vecs[0], first[k].vecs[0]):
                raise NotCovered(f"the members pass different {name}")
            _check_operand(ctx.terms, c, name, ops[k], rank, side)
        for name, shape, val, val0 in zip(c.names, c.shapes, ops[lead:], first[lead:]):
            if val.t != val0.t:
                raise NotCovered(f"the members pass different {name}")
            _check_operand(ctx.terms, c, name, val, rank, side, shape)
    return c


def _rows_out(c, name, term, rows, rank, ndim):
    """A row-indexed output (y, grad_x): the member's rows, and on the other dims what the
    contract proved a rank holds (all of them on the single device: rank None)."""
    vecs = (None,) * ndim if rank is None else c.holds_out(name, rank)
    if vecs[0] is not None:
        raise NotCovered(f"the contract's {name} is split along the batch rows")
    return Val(term, (rows,) + tuple(vecs[1:]))


def _fwd_rule(ctx, vals, key, layer, side, group):
    c = _members(ctx, vals, key, side, group, grads=False)
    terms = ctx.terms
    x = vals[0][0]
    shape = terms.shape(x.t)
    rows = _rows(c, x, shape)
    y = terms.make("block_call", (key, layer, "y"), tuple(v.t for v in vals[0]), shape)
    return [_rows_out(c, "y", y, rows, None if side == SINGLE else group[m], len(shape)) for m in range(len(vals))]


def _bwd_rule(ctx, vals, key, layer, side, params, group):
    c = _members(ctx, vals, key, side, group, grads=True)
    terms = ctx.terms
    x, g = vals[0][0], vals[0][1]
    shape = terms.shape(x.t)
    if tuple(terms.shape(g.t)) != tuple(shape):
        raise NotCovered("the output gradient is not a row selection of a tensor shaped as the batch")
    rows = _rows(c, x, shape)
    children = tuple(v.t for v in vals[0])
    grad_x = terms.make("block_call", (key, layer, "grad_x"), children, shape)
    over = None if rows is None else (rows.tobytes(),)
    grads = []
    for name, pshape in zip(c.names[:params], c.shapes[:params]):
        per_row = terms.make("block_call", (key, layer, f"rows:{name}"), children, (shape[0],) + tuple(pshape))
        grads.append((f"grad:{name}", terms.make("sum", ((0,), False, over), (per_row,), tuple(pshape))))
    out = []
    for m in range(len(vals)):
        rank = None if side == SINGLE else group[m]
        one = [_rows_out(c, "grad_x", grad_x, rows, rank, len(shape))] + \
            [full(terms, t) if rank is None else Val(t, tuple(c.holds_out(name, rank))) for name, t in grads]
        out.append(tuple(one))
    return out


def _no_numerics(*args, **kwargs):
    raise NotImplementedError("an opaque layer call has no numerics: its meaning is its proved contract")


declare(FWD, numerics=_no_numerics, rule=_fwd_rule, collective=True,
        doc="one layer's forward as an opaque call whose meaning is its proved block contract")
declare(BWD, numerics=_no_numerics, rule=_bwd_rule, collective=True,
        doc="one layer's backward as an opaque call whose meaning is its proved block contract")
