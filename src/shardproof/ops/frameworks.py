"""Framework ops seen in real graph dumps: Megatron's apex fused layer norm, vLLM's custom
kernels (as ``auto_functionalized`` nodes: output 0 is the op's return, then the new
values of the arguments it mutates), vLLM's all_reduce, and logging ops.

Each is declared once, and most reuse the ATen family they compute (the same term as
the ATen spelling, so a program mixing both still matches)."""
from __future__ import annotations

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val, shape_of
from ..algebra.ranks import combine
from .aten_attention import sdpa_num, sdpa_rule
from .aten_backward import layer_norm_backward_num, layer_norm_backward_rule
from .aten_index import embedding_rule
from .aten_rows import layer_norm_num, rms_norm_num
from .common import as_float, template
from .registry import RuleCtx, declare

# ------------------------------------------------------------------ apex (Megatron)


def _apex_ln_num(x, w, b, shape, eps):
    y, mean, rstd = layer_norm_num(x, shape, w, b, eps)
    return y, mean.reshape(-1), rstd.reshape(-1)


def _apex_ln_rule(ctx: RuleCtx, x: Val, w: Val, b: Val, shape, eps):
    """The same terms as ``native_layer_norm(x, shape, w, b, eps)``; apex returns the
    statistics flattened over the rows (views of the same values)."""
    attrs = template((x, shape, w, b, eps), {})
    lead = shape_of(ctx.terms, x)[:len(x.vecs) - len(shape)]
    stats = lead + (1,) * len(shape)
    y, mean, rstd = compute.rowwise(ctx.terms, "layer_norm", attrs, [x, w, b], len(shape),
                                    [shape_of(ctx.terms, x), stats, stats])
    rows = (int(np.prod(lead)),)
    return y, layout.reshape(ctx.terms, mean, rows), layout.reshape(ctx.terms, rstd, rows)


declare("apex.fused_layer_norm_affine_fwd", numerics=_apex_ln_num, rule=_apex_ln_rule,
        doc="Megatron/apex fused layer norm (out, mean, invvar)")


def _stats_shape(x_shape, ndims):
    return tuple(x_shape[:len(x_shape) - ndims]) + (1,) * ndims


def _apex_ln_bwd_num(g, mean, invvar, x, shape, w, b, eps, *a):
    k = _stats_shape(np.shape(x), len(shape))
    return layer_norm_backward_num(g, x, as_float(mean).reshape(k), as_float(invvar).reshape(k), w, b, len(shape))


def _apex_ln_bwd_rule(ctx: RuleCtx, g: Val, mean: Val, invvar: Val, x: Val, shape, w, b, eps, *a):
    """apex ``backward_affine(grad_output, mean, invvar, input, normalized_shape, weight,
    bias, eps)`` -> (grad_input, grad_weight, grad_bias): the statistics come flattened over
    the rows and are viewed back to x's rows (the same terms as native_layer_norm_backward)."""
    k = _stats_shape(shape_of(ctx.terms, x), len(shape))
    mean, invvar = layout.reshape(ctx.terms, mean, k), layout.reshape(ctx.terms, invvar, k)
    return layer_norm_backward_rule(ctx, g, x, mean, invvar, w, b, len(shape))


declare("apex.fused_layer_norm_affine_bwd", numerics=_apex_ln_bwd_num, rule=_apex_ln_bwd_rule,
        doc="Megatron/apex fused layer norm backward (grad_input, grad_weight, grad_bias)")

# ------------------------------------------------------------------ logging (identity)

declare("tg.log_tensor", numerics=lambda x, *a, **k: as_float(x) if np.asarray(x).dtype != bool else x,
        rule=lambda ctx, x, *a, **k: x, doc="logs a tensor, returns it")
declare("tg.inplace_log_tensor", numerics=lambda t=None, **k: (None, t), rule=lambda ctx, t=None, **k: (None, t),
        doc="logs a tensor in place (auto_functionalized: the tensor comes back unchanged)")

# ------------------------------------------------------------------ vLLM


def _rms(ctx: RuleCtx, x: Val, w: Val, eps) -> Val:
    d = shape_of(ctx.terms, x)[-1]
    attrs = template((x, [d], w, eps), {})
    return compute.rowwise(ctx.terms, "rms_norm", attrs, [x, w], 1, [shape_of(ctx.terms, x)])[0]


declare("_C.rms_norm",
        numerics=lambda result=None, input=None, weight=None, epsilon=1e-6: (
            None, rms_norm_num(input, [np.shape(input)[-1]], weight, epsilon)[0]),
        rule=lambda ctx, result=None, input=None, weight=None, epsilon=1e-6: (None, _rms(ctx, input, weight, epsilon)),
        doc="vLLM RMS norm into `result`")


def _fused_add_num(input=None, residual=None, weight=None, epsilon=1e-6):
    s = as_float(input) + as_float(residual)
    return None, rms_norm_num(s, [s.shape[-1]], weight, epsilon)[0], s


def _fused_add_rule(ctx: RuleCtx, input=None, residual=None, weight=None, epsilon=1e-6):
    s = compute.elementwise(ctx.terms, "add", (), [input, residual], commutative=True)
    return None, _rms(ctx, s, weight, epsilon), s


declare("_C.fused_add_rms_norm", numerics=_fused_add_num, rule=_fused_add_rule,
        doc="vLLM: residual += input; input = rms_norm(residual) * weight")


def _silu_and_mul_num(out=None, input=None):
    x = as_float(input)
    d = x.shape[-1] // 2
    return None, x[..., :d] / (1 + np.exp(-x[..., :d])) * x[..., d:]


def _silu_and_mul_rule(ctx: RuleCtx, out=None, input=None):
    d = shape_of(ctx.terms, input)[-1] // 2
    nd = len(input.vecs)
    gate = layout.slice_(ctx.terms, input, nd - 1, 0, d)
    up = layout.slice_(ctx.terms, input, nd - 1, d, 2 * d)
    act = compute.elementwise(ctx.terms, "silu", template((gate,), {}), [gate])
    return None, compute.elementwise(ctx.terms, "mul", (), [act, up], commutative=True)


declare("_C.silu_and_mul", numerics=_silu_and_mul_num, rule=_silu_and_mul_rule,
        doc="vLLM SwiGLU: out = silu(x[..., :d]) * x[..., d:]")


def _vllm_all_reduce_num(arrays, group):
    total = np.sum(np.stack([as_float(a) for a in arrays]), 0)
    return [total] * len(arrays)


declare("vllm.all_reduce", numerics=_vllm_all_reduce_num,
        rule=lambda ctx, vals, group: [combine(ctx.terms, vals, "sum")] * len(vals),
        collective=True, doc="vLLM tensor-parallel all_reduce (sum)")


def _rotary_num(positions=None, query=None, key=None, head_size=None, cos_sin_cache=None, is_neox=True):
    """vLLM's ``RotaryEmbedding.forward_native``: row p of the cache is [cos | sin] for
    position p (rot_dim = cache width, <= head_size); the first rot_dim entries of each
    head are rotated (neox: halves; gpt-j: even/odd pairs), the rest pass through."""
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    cs = as_float(cos_sin_cache)[pos]
    half = cs.shape[-1] // 2
    cos, sin = cs[:, None, :half], cs[:, None, half:]

    def apply(x):
        if x is None:
            return None
        x = as_float(x)
        h = x.reshape(len(pos), -1, head_size).copy()
        rot = h[..., :2 * half]
        x1, x2 = (rot[..., :half], rot[..., half:]) if is_neox else (rot[..., 0::2], rot[..., 1::2])
        o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        if is_neox:
            h[..., :2 * half] = np.concatenate([o1, o2], -1)
        else:
            h[..., 0:2 * half:2], h[..., 1:2 * half:2] = o1, o2
        return h.reshape(x.shape)
    return None, apply(query), apply(key)


def _rotary_rule(ctx: RuleCtx, positions=None, query=None, key=None, head_size=None, cos_sin_cache=None,
                 is_neox=True):
    """RoPE is exact on any selection of tokens and heads: one row-wise term over each
    head's `head_size` entries, with the cache rows the positions pick (the same term for
    query and key heads cut from one fused projection)."""
    terms = ctx.terms
    ids = layout.reshape(terms, positions, [-1])
    cs = embedding_rule(ctx, cos_sin_cache, ids)
    cs = layout.unsqueeze(terms, cs, 1)
    tokens = shape_of(terms, ids)[0]

    def apply(x: Val):
        if x is None:
            return None
        shape = shape_of(terms, x)
        heads = layout.reshape(terms, x, [tokens, -1, int(head_size)])
        out = compute.rowwise(terms, "rotary_embedding", (bool(is_neox),), [heads, cs], 1,
                              [shape_of(terms, heads)])[0]
        return layout.reshape(terms, out, shape)
    return None, apply(query), apply(key)


declare("_C.rotary_embedding", numerics=_rotary_num, rule=_rotary_rule,
        doc="vLLM in-place rotary embedding of query and key (neox or gpt-j style)")


def _attention_num(query=None, key=None, value=None, output=None, layer_name=None, **kw):
    q, k, v = (np.swapaxes(as_float(a), 0, 1) for a in (query, key, value))  # [heads, tokens, head_size]
    group = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, group, 0), np.repeat(v, group, 0)
    return None, np.swapaxes(sdpa_num(q, k, v, is_causal=True)[0], 0, 1)


def _attention_rule(ctx: RuleCtx, query=None, key=None, value=None, output=None, layer_name=None, **kw):
    """Causal attention of the tokens with each other; k/v head j serves q heads
    [j*g, (j+1)*g) with g = |q heads| / |k/v heads| (GQA). The same term as SDPA over
    [heads, tokens, head_size] with k/v repeated to q's heads."""
    if len(query.vecs) != 3 or len(key.vecs) != 3 or len(value.vecs) != 3:
        raise ValueError("attention expects query/key/value as [tokens, heads, head_size]")
    if any(v is not None for k, v in kw.items() if k.startswith("output_")):
        raise ValueError("quantized attention output (output_scale) has no rule")
    terms = ctx.terms
    nq, nk = shape_of(terms, query)[1], shape_of(terms, key)[1]
    if nk == 0 or nq % nk:
        raise ValueError(f"{nq} query heads do not group over {nk} key/value heads")
    rep = np.arange(nq) // (nq // nk)
    q, k, v = (layout.permute(terms, x, (1, 0, 2)) for x in
               (query, layout.take(terms, key, 1, rep), layout.take(terms, value, 1, rep)))
    out, _ = sdpa_rule(ctx, q, k, v, is_causal=True)
    return None, layout.permute(terms, out, (1, 0, 2))


declare("vllm.unified_attention_with_output", numerics=_attention_num, rule=_attention_rule,
        doc="vLLM attention into `output` (the KV cache it writes is hidden state, not modelled)",
        assumes="vLLM attention (unified_attention_with_output): the tokens are one sequence in prefill with no "
                "earlier KV cache, so it is causal self-attention of the given tokens, grouped-query over the "
                "k/v heads, scale 1/sqrt(head_size), no sliding window, logit soft-cap or ALiBi")
