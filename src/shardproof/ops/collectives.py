"""Collectives (``_c10d_functional``): rules and numerics over all ranks of a group.

Every collective node carries its process group as its last argument, a tuple of
global ranks (the frontends resolve group names). Rules receive the values of all
group members in group order and return one value per member.
"""
from __future__ import annotations



import numpy as np

from ..algebra import layout
from ..algebra.ranks import combine
from .common import as_float
from .registry import declare

C = "_c10d_functional."


def _reduce_np(arrays, op):
    stack = np.stack([as_float(a) for a in arrays])
    return {"sum": stack.sum(0), "avg": stack.mean(0), "max": stack.max(0), "min": stack.min(0),
            "product": stack.prod(0)}[op.lower()]


def _blocks(size, n, splits=None):
    splits = splits or [size // n] * n
    at, out = 0, []
    for s in splits:
        out.append((at, at + s))
        at += s
    return out


declare(C + "all_reduce",
        numerics=lambda arrays, op, group: [_reduce_np(arrays, op)] * len(arrays),
        rule=lambda ctx, vals, op, group: [combine(ctx.terms, vals, op)] * len(vals),
        collective=True, doc="all_reduce: Partial -> Replicate")
declare(C + "all_gather_into_tensor",
        numerics=lambda arrays, n, group: [np.concatenate([as_float(a) for a in arrays], 0)] * len(arrays),
        rule=lambda ctx, vals, n, group: [layout.concat(ctx.terms, vals, 0)] * len(vals),
        collective=True, doc="all_gather along dim 0: Shard(0) -> Replicate")


def _reduce_scatter_rule(ctx, vals, op, n, group):
    """Each rank's block reduced over the ranks (the same as the block of the reduction;
    cutting first lets a block that is one piece of a concatenated buffer be that piece)."""
    size = layout.shape_of(ctx.terms, vals[0])[0]
    return [combine(ctx.terms, [layout.slice_(ctx.terms, v, 0, lo, hi) for v in vals], op)
            for lo, hi in _blocks(size, len(vals))]


def _reduce_scatter_num(arrays, op, n, group):
    whole = _reduce_np(arrays, op)
    return [whole[lo:hi] for lo, hi in _blocks(whole.shape[0], len(arrays))]


declare(C + "reduce_scatter_tensor", numerics=_reduce_scatter_num, rule=_reduce_scatter_rule,
        collective=True, doc="reduce_scatter along dim 0: Partial -> Shard(0)")


def _a2a_rule(ctx, vals, out_splits, in_splits, group):
    n = len(vals)
    pieces = []
    for v in vals:
        size = layout.shape_of(ctx.terms, v)[0]
        pieces.append([layout.slice_(ctx.terms, v, 0, lo, hi) for lo, hi in _blocks(size, n, in_splits)])
    return [layout.concat(ctx.terms, [pieces[j][i] for j in range(n)], 0) for i in range(n)]


def _a2a_num(arrays, out_splits, in_splits, group):
    n = len(arrays)
    pieces = [[a[lo:hi] for lo, hi in _blocks(a.shape[0], n, in_splits)] for a in arrays]
    return [np.concatenate([pieces[j][i] for j in range(n)], 0) for i in range(n)]


declare(C + "all_to_all_single", numerics=_a2a_num, rule=_a2a_rule, collective=True,
        doc="all_to_all along dim 0 (in_splits of each sender)")
declare(C + "broadcast",
        numerics=lambda arrays, src, group: [arrays[list(group).index(src)]] * len(arrays),
        rule=lambda ctx, vals, src, group: [vals[list(group).index(src)]] * len(vals),
        collective=True, doc="broadcast from src")
declare(C + "wait_tensor", numerics=lambda x: x, rule=lambda ctx, x: x, doc="completion of an async collective")


