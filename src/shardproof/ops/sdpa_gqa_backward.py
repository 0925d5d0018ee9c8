"""Attention's backward under grouped-query attention as torch's kernels take it (``enable_gqa``:
fewer key/value heads than query heads, query head h reading key/value head h // g): the
gradient of key/value head j is the sum over its g query heads of the gradient each copy gets,
i.e. attention's backward on the key/value heads repeated in place, then each group of g
consecutive heads summed. Exact; both programs build it the same way, so a rank holding whole
groups holds that many key/value heads' gradients.

``gqa_backward(rule, ctx, g, q, k, v, out, lse, ...)`` -> (dq, dk, dv), or None where the heads
are not grouped (the plain rule applies); ``gqa_backward_num`` the same in numpy."""
from __future__ import annotations

import numpy as np

from ..algebra import compute, layout


def _groups(q_heads: int, kv_heads: int):
    return q_heads // kv_heads if kv_heads and q_heads != kv_heads and q_heads % kv_heads == 0 else None


def gqa_backward(rule, repeat, ctx, g, q, k, v, out, lse, *args, **kw):
    terms = ctx.terms
    nd = len(q.vecs)
    if nd < 3:
        return None
    group = _groups(layout.shape_of(terms, q)[nd - 3], layout.shape_of(terms, k)[nd - 3])
    if group is None or layout.shape_of(terms, v)[nd - 3] != layout.shape_of(terms, k)[nd - 3]:
        return None
    dq, dk, dv = rule(ctx, g, q, repeat(terms, q, k, nd), repeat(terms, q, v, nd), out, lse, *args, **kw)

    def group_sum(x):
        shape = list(layout.shape_of(terms, x))
        split = shape[:nd - 3] + [shape[nd - 3] // group, group] + shape[nd - 2:]
        return compute.reduction(terms, "sum", (), layout.reshape(terms, x, split), [nd - 2], False, combinable=True)
    return dq, group_sum(dk), group_sum(dv)


def gqa_backward_num(backward, g, q, k, v, *args, **kw):
    q_heads, kv_heads = np.shape(q)[-3] if np.ndim(q) >= 3 else 0, np.shape(k)[-3] if np.ndim(k) >= 3 else 0
    group = _groups(q_heads, kv_heads) if np.ndim(q) >= 3 else None
    if group is None:
        return None
    k, v = (np.repeat(np.asarray(x), group, axis=-3) for x in (k, v))
    dq, dk, dv = backward(g, q, k, v, *args, **kw)
    fold = lambda x: x.reshape(x.shape[:-3] + (kv_heads, group) + x.shape[-2:]).sum(-3)  # noqa: E731
    return dq, fold(dk), fold(dv)
