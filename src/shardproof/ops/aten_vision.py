"""Core-ATen vision ops: convolutions, pooling, upsampling, grid sampling, batch and group norm,
col2im, cdist/pdist, embedding_bag, FFT and diagonal.

Each rule says which dims a selection passes through, exactly:

* ops that work on each (sample, channel) plane on its own (pooling, upsampling, col2im) pass
  the leading dims through and hold the planes whole (a spatial shard is materialized);
* a convolution passes the batch dim N and its output channels from the weight's dim 0 (dim 1
  when transposed); it is the sum over input channels of per-channel contributions, so a
  shard of the input channels (on the input and the weight alike) is a partial sum that an
  all_reduce completes. Grouped convolutions hold the channels whole;
* batch norm in training computes its statistics over the batch and spatial dims: only the
  channel dim passes (a batch shard is materialized: without all-reduced statistics it relates
  to nothing); evaluation-mode batch norm is elementwise given per-channel parameters; group
  norm is per sample: the batch dim passes.

Numerics are torch's own kernels (float64)."""
from __future__ import annotations

import functools
from typing import Sequence

from ..algebra import compute, layout
from ..algebra.layout import Val, same_vec
from ..algebra.ranks import LINEARITY
from ..algebra.terms import freeze
from .aten_misc import along, torch_kernel
from .common import template
from .registry import RuleCtx, declare

T = "aten."


def out_shapes(ctx: RuleCtx) -> list:
    """The node's outputs' local shapes (None for an output the op does not compute)."""
    ty = ctx.node.type
    return [getattr(t, "shape", None) for t in ty] if isinstance(ty, tuple) else [ty.shape]


def torch_shaped(rule):
    """A rule whose outputs must have the shapes torch gives: torch answers some empty operands
    with an empty result of another shape than the op's math (a convolution over 0 input
    channels gives [N, 0, ...], not the empty sum [N, C_out, ...]): such a node is unknown."""
    @functools.wraps(rule)
    def checked(ctx: RuleCtx, *args, **kwargs):
        out = rule(ctx, *args, **kwargs)
        vals = out if isinstance(out, tuple) else (out,)
        for val, shape in zip(vals, out_shapes(ctx)):
            if isinstance(val, Val) and shape is not None and tuple(layout.shape_of(ctx.terms, val)) != tuple(shape):
                raise ValueError(f"{ctx.node.op}: torch's result has shape {tuple(shape)}, the op's math "
                                 f"{tuple(layout.shape_of(ctx.terms, val))} (an empty operand)")
        return out
    return checked


def _rest(nd: int, lead: int) -> list[int]:
    return list(range(lead, nd))


def align_dims(terms, vals: list[Val], dims: list[int]) -> list[Val]:
    """Operands paired along ``dims[k]`` of ``vals[k]``: kept when they hold the same positions
    of equally long term dims, else every one is materialized along its dim."""
    sizes = [terms.shape(v.t)[d] for v, d in zip(vals, dims)]
    if all(s == sizes[0] and same_vec(v.vecs[d], vals[0].vecs[dims[0]]) for v, d, s in zip(vals, dims, sizes)):
        return vals
    return [layout.materialize(terms, v, [d]) for v, d in zip(vals, dims)]


def lead_through(ctx: RuleCtx, op: str, attrs: tuple, vals: Sequence[Val], lead: int, whole=(), shapes=None):
    """An op that works on each position of the first `lead` dims on its own (a (sample,
    channel) plane): the leading dims of every operand in `vals` pass through (materialized
    where the operands do not hold the same positions), the other dims are held whole, as are
    the `whole` operands. Each output's term is its leading dims' term extents and its own
    local trailing dims; an output with fewer than `lead` dims needs every operand whole.
    `shapes`: the local shapes of the outputs to build (default: the node's; a list returned)."""
    terms = ctx.terms
    given, shapes = shapes is not None, out_shapes(ctx) if shapes is None else shapes
    if any(s is not None and len(s) < lead for s in shapes):
        lead = 0
    vals = [layout.materialize(terms, v, _rest(len(v.vecs), lead)) for v in vals]
    for d in range(lead):
        vals = align_dims(terms, vals, [d] * len(vals))
    if len({layout.shape_of(terms, v)[:lead] for v in vals}) > 1:
        raise ValueError(f"{op}: the operands' leading dims differ")
    whole = [layout.materialize(terms, w) for w in whole if isinstance(w, Val)]
    children = tuple(v.t for v in vals) + tuple(w.t for w in whole)
    ref = vals[0] if vals else None
    lead_shape = terms.shape(ref.t)[:lead] if lead else ()
    lead_vecs = ref.vecs[:lead] if lead else ()
    outs = []
    for i, local in enumerate(shapes):
        if local is None:
            outs.append(None)
            continue
        shape = tuple(lead_shape) + tuple(local[lead:])
        vecs = tuple(lead_vecs) + (None,) * (len(local) - lead)
        outs.append(Val(terms.make(op, attrs + (i,), children, shape), vecs))
    if given:
        return outs
    return tuple(outs) if isinstance(ctx.node.type, tuple) else outs[0]


def planes(nspatial: int, op: str | None = None, n_tensors: int = 1):
    """Rule of an op over the last `nspatial` dims of its first `n_tensors` operands (pooling,
    upsampling and their backwards): the batch and channel dims pass through."""
    def rule(ctx: RuleCtx, *args, **kwargs):
        tensors = [a for a in args[:n_tensors] if isinstance(a, Val)]
        extra = [a for a in list(args[n_tensors:]) + list(kwargs.values()) if isinstance(a, Val)]  # pool indices
        lead = len(tensors[0].vecs) - nspatial
        name = op or ctx.node.op.split(".", 1)[1]
        return lead_through(ctx, name, template(args, kwargs), tensors + extra, lead)
    return rule


def _declare_planes(name: str, nspatial: int, n_tensors: int = 1, doc: str = "", linear: bool = False) -> None:
    declare(T + name, numerics=torch_kernel(name), rule=planes(nspatial, name, n_tensors),
            doc=doc or f"{name} over the last {nspatial} dims (batch and channel dims pass through)")
    if linear:  # averages and interpolations: rank-partial sums pass through them
        LINEARITY[name] = "all"


# ------------------------------------------------------------------ pooling and upsampling

_declare_planes("avg_pool1d", 1, linear=True)
_declare_planes("adaptive_avg_pool1d", 1, linear=True)
for _n in (2, 3):
    _declare_planes(f"avg_pool{_n}d", _n, linear=True)
    _declare_planes(f"_adaptive_avg_pool{_n}d", _n, linear=True)
    _declare_planes(f"max_pool{_n}d_with_indices", _n, doc=f"max pooling over the last {_n} dims, values and "
                    "(per-plane) indices")
_declare_planes("avg_pool2d_backward", 2, 2)
_declare_planes("_adaptive_avg_pool2d_backward", 2, 2)
_declare_planes("max_pool2d_with_indices_backward", 2, 2, doc="gradient of max pooling (to the argmax positions)")
_declare_planes("upsample_bilinear2d", 2, linear=True)


def _upsample_backward_rule(ctx: RuleCtx, g: Val, output_size, input_size, *args):
    """The input size's batch and channel extents are local: left out of the term (they pass)."""
    lead = len(g.vecs) - 2
    attrs = (freeze(output_size), freeze(list(input_size)[lead:])) + template(args, {})
    return lead_through(ctx, "upsample_bilinear2d_backward", attrs, [g], lead)


declare(T + "upsample_bilinear2d_backward", numerics=torch_kernel("upsample_bilinear2d_backward"),
        rule=_upsample_backward_rule, doc="gradient of bilinear upsampling (batch and channel dims pass)")
LINEARITY["upsample_bilinear2d_backward"] = "all"


def _col2im_rule(ctx: RuleCtx, x: Val, *args):
    return lead_through(ctx, "col2im", template(args, {}), [x], len(x.vecs) - 2)


declare(T + "col2im", numerics=torch_kernel("col2im"), rule=_col2im_rule,
        doc="sum of sliding blocks [N, C*k, L] into an image [N, C, H, W]: the batch dim passes")
LINEARITY["col2im"] = "all"


def _grid_sampler_rule(ctx: RuleCtx, x: Val, grid: Val, *args):
    """N passes (input and grid aligned on it); the channels pass from the input."""
    terms = ctx.terms
    x = layout.materialize(terms, x, [2, 3])
    grid = layout.materialize(terms, grid, [1, 2, 3])
    x, grid = align_dims(terms, [x, grid], [0, 0])
    shape = ctx.node.type.shape
    t = terms.make("grid_sampler_2d", template(args, {}), (x.t, grid.t), terms.shape(x.t)[:2] + tuple(shape[2:]))
    return Val(t, x.vecs[:2] + (None, None))


declare(T + "grid_sampler_2d", numerics=torch_kernel("grid_sampler_2d"), rule=torch_shaped(_grid_sampler_rule),
        doc="bilinear/nearest sampling of [N, C, H, W] at grid [N, Ho, Wo, 2]: N and C pass")


# ------------------------------------------------------------------ convolutions


def _spatial(v: Val) -> list[int]:
    return list(range(2, len(v.vecs)))


def _contract(ctx: RuleCtx, op: str, attrs: tuple, a: Val, b: Val, pair: tuple[int, int], keep: tuple, tail) -> Val:
    """``sum_k f(a[.., k, ..], b[.., k, ..])`` over the paired dims ``pair`` of a and b, as a
    sum over a per-k contributions term: a selection of k (held alike by both operands) is a
    partial sum that an all_reduce completes. `keep`: (operand, dim) pairs whose selections pass
    to the output's leading dims; `tail`: the output's local trailing dims (held whole)."""
    terms = ctx.terms
    a, b = align_dims(terms, [a, b], list(pair))
    ops = (a, b)
    lead = [ops[i] for i, _ in keep]
    shape = tuple(terms.shape(v.t)[d] for v, (_, d) in zip(lead, keep)) + (terms.shape(a.t)[pair[0]],) + tuple(tail)
    vecs = tuple(v.vecs[d] for v, (_, d) in zip(lead, keep)) + (a.vecs[pair[0]],) + (None,) * len(tail)
    contrib = Val(terms.make(op, attrs, (a.t, b.t), shape), vecs)
    return compute.reduction(terms, "sum", (), contrib, [len(keep)], False, combinable=True)


LINEARITY.update({"conv_terms": "one", "conv_input_terms": "one", "conv_weight_terms": "one"})


def _held(terms, v: Val, groups: int, weight: bool = False) -> Val:
    """Spatial (kernel) dims held whole; grouped convolutions hold the channel dims whole too
    (a channel's group depends on its local position): the data's batch dim still passes."""
    extra = [] if groups == 1 else ([0, 1] if weight else [1])
    return layout.materialize(terms, v, _spatial(v) + extra)


def _bias_add(ctx: RuleCtx, out: Val, bias) -> Val:
    """``out + bias.view(1, -1, 1, ...)``, built as aten.add of that view builds it (so a program
    adding the bias after an all_reduce of the partial sums builds the same term)."""
    if not isinstance(bias, Val):
        return out
    shape = (1, layout.shape_of(ctx.terms, bias)[0]) + (1,) * (len(out.vecs) - 2)
    return compute.elementwise(ctx.terms, "add", (), [out, layout.reshape(ctx.terms, bias, shape)], commutative=True)


def _depthwise(terms, x: Val, w: Val, groups: int) -> bool:
    """One group per channel, one filter per group (w [C, 1, k...]): channel c of the output reads
    channel c of the input and filter c only, whatever the local number of groups."""
    xs, ws = layout.shape_of(terms, x), layout.shape_of(terms, w)
    return groups > 1 and xs[1] == groups and ws[0] == groups and ws[1] == 1


def _dw_attrs(stride, padding, dilation, transposed, output_padding) -> tuple:
    """The local group count (the local channels) is left out: the channel dim passes."""
    return ("depthwise", freeze((stride, padding, dilation, bool(transposed), output_padding)))


def _channelwise(ctx: RuleCtx, op: str, attrs: tuple, a: Val, b: Val, lead: int, tail) -> Val:
    """``f(a[.., c], b[c])`` per channel c (a's dim `lead`, b's dim 0), a's dims before it passing
    too: the channel selections of a and b aligned."""
    terms = ctx.terms
    a = layout.materialize(terms, a, range(lead + 1, len(a.vecs)))
    b = layout.materialize(terms, b, range(1, len(b.vecs)))
    a, b = align_dims(terms, [a, b], [lead, 0])
    shape = terms.shape(a.t)[:lead + 1] + tuple(tail)
    return Val(terms.make(op, attrs, (a.t, b.t), shape), a.vecs[:lead + 1] + (None,) * len(tail))


def _conv_rule(ctx: RuleCtx, x: Val, w: Val, bias, stride, padding, dilation, transposed, output_padding, groups):
    """out[n, o] = bias[o] + sum_c contribution(x[n, c], w[o, c]) (w[c, o] when transposed);
    depthwise: out[n, c] = f(x[n, c], w[c]) (a channel shard of input and filters passes)."""
    terms = ctx.terms
    tail = ctx.node.type.shape[2:]
    if _depthwise(terms, x, w, int(groups)):
        attrs = _dw_attrs(stride, padding, dilation, transposed, output_padding)
        return _bias_add(ctx, _channelwise(ctx, "conv_depthwise", attrs, x, w, 1, tail), bias)
    attrs = (freeze((stride, padding, dilation, bool(transposed), output_padding, int(groups))),)
    x, w = _held(terms, x, int(groups)), _held(terms, w, int(groups), weight=True)
    wc, wo = (0, 1) if transposed else (1, 0)
    if int(groups) != 1:  # the out channels: held whole by the materialized weight, local extent
        w = layout.materialize(terms, w)
        t = terms.make("conv_grouped", attrs, (x.t, w.t), (terms.shape(x.t)[0],) + tuple(ctx.node.type.shape[1:]))
        out = Val(t, (x.vecs[0],) + (None,) * (len(x.vecs) - 1))
    else:
        out = _contract(ctx, "conv_terms", attrs, x, w, (1, wc), ((0, 0), (1, wo)), tail)
    return _bias_add(ctx, out, bias)


declare(T + "convolution", numerics=torch_kernel("convolution"), rule=torch_shaped(_conv_rule),
        doc="N-d (transposed) convolution: the batch dim and the weight's output channels pass; input channels "
            "sharded alike on input and weight give a partial sum (an all_reduce completes it)")


def _conv_backward_rule(ctx: RuleCtx, g: Val, x: Val, w: Val, bias_sizes, stride, padding, dilation, transposed,
                        output_padding, groups, output_mask):
    """grad_input[n, c] = sum_o f(g[n, o], w[o, c]); grad_weight[o, c] = sum_n f(g[n, o], x[n, c])
    (a batch shard: a partial sum, the data-parallel gradient all_reduce completes it);
    grad_bias[o] = sum of g over the batch and spatial dims."""
    terms = ctx.terms
    groups = int(groups)
    attrs = (freeze((stride, padding, dilation, bool(transposed), output_padding, groups)),)
    shapes = out_shapes(ctx)
    if _depthwise(terms, x, w, groups):
        return _depthwise_backward(ctx, g, x, w, _dw_attrs(stride, padding, dilation, transposed, output_padding),
                                   shapes, output_mask)
    g, x, w = _held(terms, g, groups), _held(terms, x, groups), _held(terms, w, groups, weight=True)
    wc, wo = (0, 1) if transposed else (1, 0)
    outs = [None, None, None]
    if output_mask[0] and shapes[0] is not None:
        if groups != 1:
            t = terms.make("conv_input_grouped", attrs, (g.t, w.t), (terms.shape(g.t)[0],) + tuple(shapes[0][1:]))
            outs[0] = Val(t, (g.vecs[0],) + (None,) * (len(shapes[0]) - 1))
        else:
            outs[0] = _contract(ctx, "conv_input_terms", attrs, g, w, (1, wo), ((0, 0), (1, wc)), shapes[0][2:])
    if output_mask[1] and shapes[1] is not None:
        gw, xw = align_dims(terms, [g, x], [0, 0])
        if groups != 1:
            gw, xw = layout.materialize(terms, gw), layout.materialize(terms, xw)
            t = terms.make("conv_weight_grouped", attrs, (gw.t, xw.t), tuple(shapes[1]))
            outs[1] = Val(t, (None,) * len(shapes[1]))
        else:
            keep = ((1, 1), (0, 1)) if transposed else ((0, 1), (1, 1))
            outs[1] = _contract(ctx, "conv_weight_terms", attrs, gw, xw, (0, 0), keep, shapes[1][2:])
    if output_mask[2] and shapes[2] is not None:
        outs[2] = compute.reduction(terms, "sum", (), g, [0] + _spatial(g), False, combinable=True)
    return tuple(outs)


def _depthwise_backward(ctx: RuleCtx, g: Val, x: Val, w: Val, attrs: tuple, shapes, output_mask) -> tuple:
    """grad_input[n, c] = f(g[n, c], w[c]); grad_weight[c] = sum_n f(g[n, c], x[n, c]) (per-sample
    rows summed: a batch shard is a partial sum); grad_bias[c] = sum of g[:, c]."""
    terms = ctx.terms
    outs = [None, None, None]
    if output_mask[0] and shapes[0] is not None:
        outs[0] = _channelwise(ctx, "conv_depthwise_input", attrs, g, w, 1, shapes[0][2:])
    if output_mask[1] and shapes[1] is not None:
        gx, xx = layout.materialize(terms, g, _spatial(g)), layout.materialize(terms, x, _spatial(x))
        gx, xx = align_dims(terms, [gx, xx], [0, 0])
        gx, xx = align_dims(terms, [gx, xx], [1, 1])
        shape = terms.shape(gx.t)[:2] + tuple(shapes[1][1:])
        rows = Val(terms.make("conv_depthwise_weight_rows", attrs, (gx.t, xx.t), shape),
                   gx.vecs[:2] + (None,) * (len(shapes[1]) - 1))
        outs[1] = compute.reduction(terms, "sum", (), rows, [0], False, combinable=True)
    if output_mask[2] and shapes[2] is not None:
        outs[2] = compute.reduction(terms, "sum", (), g, [0] + _spatial(g), False, combinable=True)
    return tuple(outs)


declare(T + "convolution_backward", numerics=torch_kernel("convolution_backward"),
        rule=torch_shaped(_conv_backward_rule),
        doc="gradients of a convolution: grad_input passes the batch dim, grad_weight and grad_bias are sums over "
            "the batch (a batch shard: partial sums)")


# ------------------------------------------------------------------ batch norm and group norm


def _per_channel(ctx: RuleCtx, p, nd: int):
    """A per-channel parameter [C] viewed as [C, 1, ...] against an [N, C, ...] input."""
    if not isinstance(p, Val):
        return None
    for _ in range(nd - 2):
        p = layout.unsqueeze(ctx.terms, p, -1)
    return p


def _present(*ps) -> tuple:
    return tuple(isinstance(p, Val) for p in ps)


def _empty(ctx: RuleCtx, shape) -> Val:
    return Val(ctx.terms.make("empty_stats", (), (), tuple(shape)), (None,) * len(shape))


def _bn_eval(ctx: RuleCtx, x: Val, w, b, rm: Val, rv: Val, eps) -> tuple:
    """Running statistics: elementwise, given each channel's parameters (any selection passes)."""
    nd = len(x.vecs)
    ps = [_per_channel(ctx, p, nd) for p in (w, b, rm, rv)]
    out = compute.elementwise(ctx.terms, "batch_norm_eval", (freeze(eps), _present(w, b)),
                              [x] + [p for p in ps if p is not None])
    return (out,) + tuple(_empty(ctx, s) for s in out_shapes(ctx)[1:])


def _bn_train(ctx: RuleCtx, x: Val, w, b, rm, rv, momentum, eps) -> tuple:
    """Statistics over the batch and spatial dims: those are held whole (a batch shard is
    materialized), the channel dim passes."""
    terms = ctx.terms
    nd = len(x.vecs)
    x = layout.materialize(terms, x, [0] + list(range(2, nd)))
    ps = [_per_channel(ctx, p, nd) for p in (w, b)]
    attrs = (freeze(eps), _present(w, b))
    out = compute.elementwise(terms, "batch_norm", attrs, [x] + [p for p in ps if p is not None])
    stats = [Val(terms.make("batch_norm_stats", (freeze(eps), i), (x.t,), (terms.shape(x.t)[1],)), (x.vecs[1],))
             for i in (0, 1)]
    outs = [out] + stats
    for k, r in enumerate((rm, rv)):
        if len(out_shapes(ctx)) > 3 and isinstance(r, Val):  # the functional form's updated running stats
            outs.append(compute.elementwise(terms, "batch_norm_running", (freeze(momentum), k), [r, stats[k]]))
    return tuple(outs)


def _bn_legit_rule(ctx: RuleCtx, x: Val, w, b, *rest):
    if len(rest) == 3:  # the no_stats overload: (training, momentum, eps)
        training, momentum, eps = rest
        rm = rv = None
    else:
        rm, rv, training, momentum, eps = rest
    if not training:
        if not isinstance(rm, Val):
            raise ValueError("batch norm in evaluation mode without running statistics")
        return _bn_eval(ctx, x, w, b, rm, rv, eps)
    return _bn_train(ctx, x, w, b, rm, rv, momentum, eps)


BN_DOC = ("batch norm: in training the statistics span the batch and spatial dims (only the channel dim "
          "passes; a batch shard needs all-reduced statistics), in evaluation elementwise per channel")
declare(T + "_native_batch_norm_legit", numerics=torch_kernel("_native_batch_norm_legit"), rule=_bn_legit_rule,
        doc=BN_DOC)
declare(T + "_native_batch_norm_legit_no_training", numerics=torch_kernel("_native_batch_norm_legit_no_training"),
        rule=lambda ctx, x, w, b, rm, rv, momentum, eps: _bn_eval(ctx, x, w, b, rm, rv, eps), doc=BN_DOC)
declare(T + "_native_batch_norm_legit_functional", numerics=torch_kernel("_native_batch_norm_legit_functional"),
        rule=_bn_legit_rule,
        doc=BN_DOC + "; also the updated running statistics")


def _gn_attrs(C, HxW, group, eps, *params) -> tuple:
    """The local batch size N is left out: the batch dim passes."""
    return (freeze((C, HxW, group, eps)), _present(*params))


def _group_norm_rule(ctx: RuleCtx, x: Val, w, b, N, C, HxW, group, eps):
    """Per sample: the batch dim passes, the rest (and the affine parameters) held whole."""
    return lead_through(ctx, "group_norm", _gn_attrs(C, HxW, group, eps, w, b), [x], 1, whole=[w, b])


declare(T + "native_group_norm", numerics=torch_kernel("native_group_norm"), rule=_group_norm_rule,
        doc="group norm (per sample: the batch dim passes), with mean and rstd [N, group]")


def _group_norm_backward_rule(ctx: RuleCtx, g: Val, x: Val, mean: Val, rstd: Val, w, N, C, HxW, group, output_mask):
    """grad_input per sample (the batch dim passes); grad_weight and grad_bias are sums over the
    batch of per-sample rows (a batch shard: partial sums an all_reduce completes)."""
    terms = ctx.terms
    attrs = _gn_attrs(C, HxW, group, None, w)
    shapes = out_shapes(ctx)
    outs = [None, None, None]
    vals = [g, x, mean, rstd]
    if output_mask[0] and shapes[0] is not None:
        outs[0] = lead_through(ctx, "group_norm_grad_input", attrs, vals, 1, whole=[w], shapes=[shapes[0]])[0]
    if output_mask[1] and shapes[1] is not None:
        rows_shape = (layout.shape_of(terms, g)[0],) + tuple(shapes[1])
        rows = lead_through(ctx, "group_norm_grad_weight_rows", attrs, vals, 1, shapes=[rows_shape])[0]
        outs[1] = compute.reduction(terms, "sum", (), rows, [0], False, combinable=True)
    if output_mask[2] and shapes[2] is not None:
        outs[2] = compute.reduction(terms, "sum", (), g, [0] + _spatial(g), False, combinable=True)
    return tuple(outs)


declare(T + "native_group_norm_backward", numerics=torch_kernel("native_group_norm_backward"),
        rule=_group_norm_backward_rule, doc="gradients of group norm (grad_weight, grad_bias: sums over the batch)")


# ------------------------------------------------------------------ distances, bags, FFT, diagonal


def _cdist_rule(ctx: RuleCtx, x1: Val, x2: Val, p, compute_mode=None):
    """Rows of x1 and of x2 pass (the output's last two dims); the feature dim is held whole;
    batch dims pass where both hold the same positions."""
    terms = ctx.terms
    nd = len(x1.vecs)
    x1, x2 = layout.materialize(terms, x1, [nd - 1]), layout.materialize(terms, x2, [len(x2.vecs) - 1])
    shape = ctx.node.type.shape
    if len(x2.vecs) != nd or layout.shape_of(terms, x1)[:nd - 2] != layout.shape_of(terms, x2)[:nd - 2]:
        x1, x2 = layout.materialize(terms, x1, range(nd - 2)), layout.materialize(terms, x2, range(len(x2.vecs) - 2))
        lead_shape, lead_vecs = tuple(shape[:-2]), (None,) * (len(shape) - 2)
    else:
        for d in range(nd - 2):
            x1, x2 = align_dims(terms, [x1, x2], [d, d])
        lead_shape, lead_vecs = terms.shape(x1.t)[:nd - 2], x1.vecs[:nd - 2]
    rows = (terms.shape(x1.t)[-2], terms.shape(x2.t)[-2])
    t = terms.make("cdist", (freeze(p),), (x1.t, x2.t), tuple(lead_shape) + rows)
    return Val(t, tuple(lead_vecs) + (x1.vecs[-2], x2.vecs[-2]))


declare(T + "_cdist_forward", numerics=torch_kernel("_cdist_forward"), rule=torch_shaped(_cdist_rule),
        doc="p-norm distances between the rows of x1 and of x2 (rows pass, features held whole)")
declare(T + "_pdist_forward", numerics=torch_kernel("_pdist_forward"),
        rule=lambda ctx, x, p=2: lead_through(ctx, "pdist", (freeze(p),), [x], 0),
        doc="pairwise distances of the rows (needs every row: the input held whole)")


def _embedding_bag_rule(ctx: RuleCtx, w: Val, ids: Val, offsets: Val, *args, **kwargs):
    """Like embedding and a reduction over each bag: the embedding dim (weight dim 1) passes, the
    rows, indices, offsets and per-sample weights are held whole."""
    terms = ctx.terms
    w = layout.materialize(terms, w, [0])
    rest = [layout.materialize(terms, v) for v in [ids, offsets] + [a for a in list(args) + list(kwargs.values())
                                                                      if isinstance(a, Val)]]
    attrs = template(args, kwargs)
    outs = []
    for i, local in enumerate(out_shapes(ctx)):
        if i in (0, 3) and len(local) == 2:  # the bags (and, mode max, the argmax rows) per embedding column
            shape = (local[0], terms.shape(w.t)[1])
            t = terms.make("embedding_bag", attrs + (i,), (w.t,) + tuple(v.t for v in rest), shape)
            outs.append(Val(t, (None, w.vecs[1])))
        else:
            outs.append(Val(terms.make("embedding_bag_index", attrs + (i,), tuple(v.t for v in rest), tuple(local)),
                            (None,) * len(local)))
    return tuple(outs)


declare(T + "_embedding_bag", numerics=torch_kernel("_embedding_bag"), rule=torch_shaped(_embedding_bag_rule),
        doc="sums (means, maxes) of bags of embedding rows: the embedding dim passes")


def _fft_rule(op: str):
    def rule(ctx: RuleCtx, x: Val, dim, normalization, last):
        return along(ctx, op, (int(normalization), freeze(last)), x, list(dim))
    return rule


for _op in ("_fft_r2c", "_fft_c2r"):
    declare(T + _op, numerics=torch_kernel(_op), rule=_fft_rule(_op),
            doc="FFT along dims (the other, batch dims pass; a sharded FFT dim: materialized)")
LINEARITY.update({"_fft_r2c": "all", "_fft_c2r": "all"})


def _diagonal_rule(ctx: RuleCtx, x: Val, offset=0, dim1=0, dim2=1):
    terms = ctx.terms
    nd = len(x.vecs)
    d1, d2 = dim1 % nd, dim2 % nd
    x = layout.materialize(terms, x, [d1, d2])
    ts = terms.shape(x.t)
    keep = [d for d in range(nd) if d not in (d1, d2)]
    shape = tuple(ts[d] for d in keep) + (ctx.node.type.shape[-1],)
    t = terms.make("diagonal", (int(offset), d1, d2), (x.t,), shape)
    return Val(t, tuple(x.vecs[d] for d in keep) + (None,))


declare(T + "diagonal", numerics=torch_kernel("diagonal"), rule=_diagonal_rule,
        doc="the diagonal of two dims (a view): the other dims pass, the two held whole")
LINEARITY["diagonal"] = "all"
