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
from ..algebra.layout import full
from .registry import ArgsMismatch, declare

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


def _a2a_match(members):
    """Split sizes may differ per rank (MoE routing), but what member j sends to member i
    must be what i expects from j. The rule gets every member's splits."""
    outs, ins = [list(a[1]) if a[1] is not None else None for a in members], \
        [list(a[2]) if a[2] is not None else None for a in members]
    n = len(members)
    for i in range(n):
        for j in range(n):
            if outs[i] is not None and ins[j] is not None and ins[j][i] != outs[i][j]:
                raise ArgsMismatch(f"member {j} sends {ins[j][i]} rows to member {i}, which expects {outs[i][j]} "
                                   f"(input splits {ins}, output splits {outs})")
    return outs, ins, members[0][-1]


def _even(size, n, splits):
    if splits is None and size % n:
        raise ValueError(f"dim 0 ({size}) is not divisible by the group size {n}")
    if splits is not None and sum(splits) != size:
        raise ValueError(f"split sizes {splits} do not add up to dim 0 ({size})")
    return _blocks(size, n, splits)


def _a2a_rule(ctx, vals, out_splits, in_splits, group):
    n = len(vals)
    pieces = []
    for v, splits in zip(vals, in_splits):
        size = layout.shape_of(ctx.terms, v)[0]
        pieces.append([layout.slice_(ctx.terms, v, 0, lo, hi) for lo, hi in _even(size, n, splits)])
    return [layout.concat(ctx.terms, [pieces[j][i] for j in range(n)], 0) for i in range(n)]


def _a2a_num(arrays, out_splits, in_splits, group):
    n = len(arrays)
    pieces = [[a[lo:hi] for lo, hi in _even(a.shape[0], n, splits)] for a, splits in zip(arrays, in_splits)]
    return [np.concatenate([pieces[j][i] for j in range(n)], 0) for i in range(n)]


declare(C + "all_to_all_single", numerics=_a2a_num, rule=_a2a_rule, collective=True, match=_a2a_match,
        doc="all_to_all along dim 0 (each member's own split sizes; sends must match the peers' receives)")


def _root(src, group):
    """A root given as a group rank (c10d's functional ops and ours take group ranks)."""
    if not 0 <= int(src) < len(group):
        raise ValueError(f"root {src} is not a rank of group {list(group)}")
    return int(src)


def _undefined(ctx, like, member):
    """A buffer whose value the backend leaves undefined (a non-root rank of reduce)."""
    shape = layout.shape_of(ctx.terms, like)
    return full(ctx.terms, ctx.terms.make("opaque", (ctx.node.op, ctx.node.name, ("undefined", member), 0), (), shape))


declare(C + "broadcast",
        numerics=lambda arrays, src, group: [arrays[_root(src, group)]] * len(arrays),
        rule=lambda ctx, vals, src, group: [vals[_root(src, group)]] * len(vals),
        collective=True, doc="broadcast from group rank src")

R = "shardproof_c10d."


def _reduce_rule(ctx, vals, op, dst, group):
    total = combine(ctx.terms, vals, op)
    return [total if i == _root(dst, group) else _undefined(ctx, v, i) for i, v in enumerate(vals)]


def _reduce_num(arrays, op, dst, group):
    total = _reduce_np(arrays, op)
    return [total if i == _root(dst, group) else np.full(np.shape(a), np.nan) for i, a in enumerate(arrays)]


declare(R + "reduce", numerics=_reduce_num, rule=_reduce_rule, collective=True,
        doc="reduce to group rank dst; the other ranks' buffers are undefined (backend-defined)")


def _scatter_match(members):
    """The root must agree; only the root passes pieces."""
    if len({repr(a[2]) for a in members}) > 1:
        raise ArgsMismatch(f"the members scatter from different roots {[a[2] for a in members]}")
    return [list(a[1]) for a in members], members[0][2], members[0][-1]


def _scatter_pieces(pieces, src, group, shapes, piece_shape):
    mine = pieces[_root(src, group)]
    if len(mine) != len(group) or [tuple(piece_shape(p)) for p in mine] != [tuple(s) for s in shapes]:
        raise ValueError(f"scatter: the root passes {len(mine)} pieces for {len(group)} ranks, or of other shapes")
    return list(mine)


def _scatter_rule(ctx, vals, pieces, src, group):
    return _scatter_pieces(pieces, src, group, [layout.shape_of(ctx.terms, v) for v in vals],
                           lambda p: layout.shape_of(ctx.terms, p))


def _scatter_num(arrays, pieces, src, group):
    return [as_float(p) for p in _scatter_pieces(pieces, src, group, [np.shape(a) for a in arrays], np.shape)]


declare(R + "scatter", numerics=_scatter_num, rule=_scatter_rule, collective=True, match=_scatter_match,
        doc="scatter: group rank i receives piece i of group rank src")


def _gather_rule(ctx, vals, n, dst, group):
    stacked = layout.concat(ctx.terms, [layout.unsqueeze(ctx.terms, v, 0) for v in vals], 0)
    return [stacked if i == _root(dst, group) else _undefined(ctx, stacked, i) for i in range(len(vals))]


def _gather_num(arrays, n, dst, group):
    stacked = np.stack([as_float(a) for a in arrays])
    return [stacked if i == _root(dst, group) else np.full(stacked.shape, np.nan) for i in range(len(arrays))]


declare(R + "gather", numerics=_gather_num, rule=_gather_rule, collective=True,
        doc="gather: the members' tensors stacked on group rank dst (undefined elsewhere)")
declare(C + "wait_tensor", numerics=lambda x: x, rule=lambda ctx, x: x, doc="completion of an async collective")


