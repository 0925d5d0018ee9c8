"""ATen scaled dot-product attention: forward and backward rules, with GQA and masks."""
from __future__ import annotations

import math

from weakref import WeakKeyDictionary

import numpy as np

from ..algebra import layout
from ..algebra.layout import Val
from ..algebra.terms import freeze
from .common import as_float
from .pairing import fits as _fits, pairing_of as _pairing
from .registry import RuleCtx, declare
from .sdpa_gqa_backward import gqa_backward, gqa_backward_num
from .sdpa_reuse import earlier_selection, record

T = "aten."

# ------------------------------------------------------------------ attention


def _sdpa_scores(q, k, is_causal, attn_mask, scale):
    """Scaled, masked attention scores q k^T (the numerics shared by forward and backward)."""
    s = (1 / np.sqrt(q.shape[-1])) if scale is None else scale
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * s
    if is_causal:
        L, S = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((L, S), bool)), scores, -np.inf)
    if attn_mask is not None:
        m = np.asarray(attn_mask)
        scores = np.where(m, scores, -np.inf) if m.dtype == bool else scores + m
    return scores, s


def _gqa_repeat(q, kv):
    """Key/value heads repeated in place to the query's head count (grouped-query attention)."""
    hq, hkv = (np.shape(x)[-3] if np.ndim(x) >= 3 else 0 for x in (q, kv))
    return np.repeat(kv, hq // hkv, axis=-3) if hkv and hq != hkv and hq % hkv == 0 else kv


def sdpa_num(q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None, **kw):
    q, k, v = as_float(q), as_float(k), as_float(v)
    k, v = _gqa_repeat(q, k), _gqa_repeat(q, v)
    scores, _ = _sdpa_scores(q, k, is_causal, attn_mask, scale)
    mx = scores.max(-1, keepdims=True)
    e = np.exp(scores - mx)
    lse = (np.log(e.sum(-1)) + mx[..., 0])
    return np.matmul(e / e.sum(-1, keepdims=True), v), lse


def _pairings(terms, ops: list, d: int):
    """Per k/v operand: (pairing, q positions, its positions, q extent, its extent), or None."""
    qsize = terms.shape(ops[0].t)[d]
    qpos = layout.vec_array(ops[0].vecs[d], qsize)
    out = []
    for o in ops[1:]:
        size = terms.shape(o.t)[d]
        pos = layout.vec_array(o.vecs[d], size)
        pairing = _pairing(qpos, pos, qsize, size)
        if pairing is None:
            return None
        out.append((pairing, qpos, pos, qsize, size))
    return out


def _mask_child(terms, mask: Val, q: Val) -> int:
    """An attention mask as a child of the attention term: whole along its key dim, and
    along every other dim where it is not held as the query is (broadcast from the right),
    so mask row i stays paired with query row i."""
    nd = len(q.vecs)
    m = layout.materialize(terms, mask, [len(mask.vecs) - 1])
    m = layout.materialize(terms, m, [d for d in range(len(m.vecs) - 1)
                                      if not layout.same_vec(m.vecs[d], q.vecs[d + nd - len(m.vecs)])])
    return m.t


_BUILT: WeakKeyDictionary = WeakKeyDictionary()  # term store -> sdpa operands -> pairings built over them


def _sdpa_scale(terms, q: Val, scale):
    """The scale attention applies, exactly: torch's default is ``1 / sqrt(head_dim)``
    computed in double precision (``sdp::calculate_scale``), the very value Python's
    ``1 / math.sqrt(d)`` gives, so an explicit scale equal to it is the same kernel call."""
    if scale is None:
        scale = 1.0 / math.sqrt(layout.shape_of(terms, q)[-1])
    return freeze(float(scale))


def _gqa_heads(terms, q: Val, kv: Val, nd: int) -> Val:
    """Grouped-query attention (fewer key/value heads than query heads, as torch's kernels take
    them): query head h reads key/value head h // g, i.e. the key/value heads repeated in place
    (``repeat_interleave``), a selection with repeated positions."""
    if nd < 3:
        return kv
    hq, hkv = (len(layout.vec_array(x.vecs[nd - 3], terms.shape(x.t)[nd - 3])) for x in (q, kv))
    if hq == hkv or hq % hkv:
        return kv
    return layout.take(terms, kv, nd - 3, np.repeat(np.arange(hkv), hq // hkv))


def sdpa_rule(ctx: RuleCtx, q: Val, k: Val, v: Val, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None, **kw):
    """Attention is exact on any common selection of the batch/head dims, and on a
    selection of query rows unless a causal mask ties rows to absolute positions.

    One program's head positions may fit several pairings (a rank holding one query
    head fits a shift and any grouping): each is exact for the heads it holds, and a
    pairing the other program already built over the same operands is preferred, so
    both build the same term (as reshape prefers a split the other program built)."""
    terms = ctx.terms
    nd = len(q.vecs)
    k, v = (_gqa_heads(terms, q, kv, nd) for kv in (k, v))
    q = layout.materialize(terms, q, [nd - 1] + ([nd - 2] if is_causal else []))
    k = layout.materialize(terms, k, [nd - 2, nd - 1])
    v = layout.materialize(terms, v, [nd - 2, nd - 1])
    ops = [q, k, v]
    found = []
    for d in range(nd - 2):
        reused = earlier_selection(terms, ops, d)  # heads of one fused projection (sdpa_reuse.py)
        if reused is not None and _pairings(terms, reused, d) is not None:
            ops = reused
        pairings = _pairings(terms, ops, d)
        if pairings is None:
            mats = [layout.materialize(terms, o, [d]) for o in ops]
            record(terms, ops, mats, d)
            ops = mats
            pairings = _pairings(terms, ops, d)
        found.append(pairings)
    q, k, v = ops
    children = (q.t, k.t, v.t)
    if isinstance(attn_mask, Val):
        children += (_mask_child(terms, attn_mask, q),)
    base = (freeze(dropout_p), bool(is_causal), _sdpa_scale(terms, q, scale))
    built = _BUILT.setdefault(terms, {}).setdefault(base + children, [])
    shifts = next((b for b in built if all(_fits(p, *f[1:]) for dim, fs in zip(b, found) for p, f in zip(dim, fs))),
                  None)
    if shifts is None:
        shifts = tuple(tuple(f[0] for f in fs) for fs in found)
        built.append(shifts)
    attrs = base + (shifts,)
    qs = terms.shape(q.t)
    out = Val(terms.make("sdpa", attrs + (0,), children, qs[:-1] + (terms.shape(v.t)[-1],)), q.vecs[:-1] + (None,))
    lse = Val(terms.make("sdpa", attrs + (1,), children, qs[:-1]), q.vecs[:-1])
    return out, lse


declare((T + "_scaled_dot_product_flash_attention_for_cpu", T + "_scaled_dot_product_efficient_attention",
         T + "_scaled_dot_product_flash_attention"),
        numerics=sdpa_num, rule=sdpa_rule, doc="scaled dot-product attention (out, logsumexp)")
def _sdpa_backward_num(g, q, k, v, out, lse, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None, **kw):
    g, q, k, v = as_float(g), as_float(q), as_float(k), as_float(v)
    grouped = gqa_backward_num(_sdpa_backward_num, g, q, k, v, out, lse, dropout_p, is_causal, attn_mask, scale, **kw)
    if grouped is not None:  # grouped-query heads (ops/sdpa_gqa_backward.py)
        return grouped
    scores, s = _sdpa_scores(q, k, is_causal, attn_mask, scale)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    dv = np.matmul(np.swapaxes(p, -1, -2), g)
    dp = np.matmul(g, np.swapaxes(v, -1, -2))
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return np.matmul(ds, k) * s, np.matmul(np.swapaxes(ds, -1, -2), q) * s, dv


def _whole_groups(pairing: tuple, qpos: np.ndarray, pos: np.ndarray, qsize: int, size: int) -> bool:
    """Whether the q positions held include every q position paired with a held k/v
    position: the k/v gradient, a sum over those q positions, is then whole here."""
    if pairing[0] == "shift":
        return True
    paired = {int(p): [] for p in pos}
    for p in range(qsize):
        if pairing[0] == "group":
            kv = p * size // qsize
        else:
            kv = pairing[1] + p // pairing[2]
        if kv in paired:
            paired[kv].append(p)
    held_q = set(int(p) for p in qpos)
    return all(set(ps) <= held_q for ps in paired.values())


def _disjoint_heads(terms, q: Val, k: Val, v: Val) -> bool:
    """Whether q, k and v hold disjoint positions of one term (along some dim)."""
    shape = terms.shape(q.t)
    for d in range(len(shape)):
        sets = [set(layout.vec_array(x.vecs[d], shape[d]).tolist()) for x in (q, k, v)]
        if not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2]):
            return True
    return False


def _sdpa_backward_rule(ctx: RuleCtx, g: Val, q: Val, k: Val, v: Val, out: Val, lse: Val, dropout_p=0.0,
                        is_causal=False, attn_mask=None, scale=None, **kw):
    """Attention's backward, exact on the selections its forward is exact on (the same
    pairing of q heads with k/v heads): gradients of q rows and of k/v heads are whole when
    the rank holds every q head paired with its k/v heads (else they are partial: no rule).
    An explicit mask is one more child, held as the forward holds it (:func:`_mask_child`)."""
    if attn_mask is not None and not isinstance(attn_mask, Val):
        raise ValueError("attention backward with a constant mask has no rule")
    grouped = gqa_backward(_sdpa_backward_rule, _gqa_heads, ctx, g, q, k, v, out, lse, dropout_p, is_causal,
                           attn_mask, scale, **kw)
    if grouped is not None:  # grouped-query heads (ops/sdpa_gqa_backward.py)
        return grouped
    terms = ctx.terms
    nd = len(q.vecs)
    rows = [nd - 2] if is_causal else []
    q, g, out = (layout.materialize(terms, x, [nd - 1] + rows) for x in (q, g, out))
    lse = layout.materialize(terms, lse, [nd - 2] if is_causal else [])
    k = layout.materialize(terms, k, [nd - 2, nd - 1])
    v = layout.materialize(terms, v, [nd - 2, nd - 1])
    found = []
    # k/v expanded to q's heads (GQA's repeat): each copy has its own gradient, indexed like q
    repeated = [any(len(np.unique(p)) != len(p) for p in (layout.vec_array(x.vecs[d], terms.shape(x.t)[d])
                                                       for d in range(nd - 2))) for x in (k, v)]
    for d in range(nd - 2):
        reused = earlier_selection(terms, [q, k, v], d)  # the forward's selection of fused heads
        if reused is not None and _pairings(terms, reused, d) is not None:
            q, k, v = reused
        pairings = _pairings(terms, [q, k, v], d)
        if pairings is None or not all(_whole_groups(*f) for f, rep in zip(pairings, repeated) if not rep):
            raise ValueError("the ranks' q and k/v heads are not paired by a rule (or a k/v head's q heads are split)")
        qpos = layout.vec_array(q.vecs[d], terms.shape(q.t)[d])
        offsets = []
        for x in (g, out, lse):  # row-aligned with q: the same positions of their own terms, up to an offset
            pos = layout.vec_array(x.vecs[d], terms.shape(x.t)[d])
            if len(pos) != len(qpos) or len(set((pos - qpos).tolist())) > 1:
                raise ValueError("attention backward: the gradient, output and logsumexp are not held as the query is")
            offsets.append(int(pos[0] - qpos[0]) if len(pos) else 0)
        found.append(tuple(f[0] for f in pairings) + tuple(offsets))
    attrs = (freeze(dropout_p), bool(is_causal), _sdpa_scale(terms, q, scale), tuple(found))
    children = (g.t, q.t, k.t, v.t, out.t, lse.t) + ((_mask_child(terms, attn_mask, q),) if attn_mask is not None else ())
    if q.t == k.t == v.t and not any(repeated) and _disjoint_heads(terms, q, k, v):
        # q, k, v cut from one fused projection: one gradient of it, each cut where its operand was
        # (not when k/v are expanded to q's heads: each copy's gradient is its own, summed later)
        fused = terms.make("sdpa_backward", attrs + ("fused",), children, terms.shape(q.t))
        return tuple(Val(fused, x.vecs) for x in (q, k, v))
    def grad(i, x, per_copy):
        if not per_copy:
            return Val(terms.make("sdpa_backward", attrs + (i,), children, terms.shape(x.t)), x.vecs)
        shape = terms.shape(q.t)[:nd - 2] + terms.shape(x.t)[nd - 2:]
        return Val(terms.make("sdpa_backward", attrs + (i, "per_copy"), children, shape), q.vecs[:nd - 2] + x.vecs[nd - 2:])
    return tuple(grad(i, x, per_copy) for i, (x, per_copy) in enumerate(((q, False), (k, repeated[0]), (v, repeated[1]))))


declare(T + "_scaled_dot_product_flash_attention_for_cpu_backward", numerics=_sdpa_backward_num,
        rule=_sdpa_backward_rule, doc="scaled dot-product attention backward (grad q, k, v)")
declare(T + "scaled_dot_product_attention", numerics=lambda *a, **k: sdpa_num(*a, **k)[0],
        rule=lambda ctx, *a, **k: sdpa_rule(ctx, *a, **k)[0], doc="scaled dot-product attention")
