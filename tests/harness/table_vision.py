"""Harness entries: the vision ops of ops/aten_vision.py (convolutions, pooling, upsampling, grid
sampling, batch/group norm, col2im, cdist/pdist, embedding_bag, FFT, diagonal) and the
data-dependent and symbolic ops of ops/aten_dynamic.py."""
from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from .core import Draw, T, aten
from .draws import F32, F64, tensor
from .table import A, entry
from .table_views import _ids

FL = (F64, F32)
A_ = torch.ops.aten


def _side(draw, lo=1, hi=6):
    return draw(st.integers(lo, hi))


def _image(draw, nsp, lo=2, batched=True, **kw):
    lead = ((_side(draw, 1, 3),) if batched else ()) + (_side(draw, 1, 3),)
    shp = lead + tuple(_side(draw, lo, 6) for _ in range(nsp))
    return tensor(draw, shp, dts=FL, **kw)


def _conv_config(draw):
    """(x, w, out channels, params); a depthwise config (groups = channels, one filter each) half
    the time: its local programs pass their own channel count as groups (see _groups)."""
    nsp = draw(st.integers(1, 2))
    n, g = _side(draw, 1, 3), draw(st.sampled_from([1, 1, 2, "depthwise", "depthwise"]))
    if g == "depthwise":
        g = _side(draw, 1, 4)
        cin = cout = g
    else:
        cin, cout = g * _side(draw, 1, 2), g * _side(draw, 1, 2)
    k = [_side(draw, 1, 3) for _ in range(nsp)]
    sp = [k[i] + _side(draw, 0, 3) for i in range(nsp)]
    dilation, transposed = [1] * nsp, draw(st.booleans())
    stride, padding = [draw(st.integers(1, 2))] * nsp, [0 if transposed else draw(st.integers(0, 1))] * nsp
    x = tensor(draw, (n, cin) + tuple(sp), dts=FL)
    # a weight at a storage offset: torch's CPU (mkldnn) float32 kernel refuses it ("could not construct a
    # memory descriptor"): weights are drawn contiguous
    w = tensor(draw, ((cin, cout // g) if transposed else (cout, cin // g)) + tuple(k), dts=(x.dtype,), views=False)
    params = [stride, padding, dilation, transposed, [0] * nsp, g]
    return x, w, cout, params


def _groups(params, x, w, shapes):
    """A depthwise convolution's rank passes its local channel count as groups."""
    groups, local = params[5], list(params)
    if groups > 1 and x.shape[1] == groups and w.shape[0] == groups and w.shape[1] == 1:
        local[5] = shapes["x"][1]
    return local


@entry(A + "convolution")
def convolution(draw, op):
    x, w, cout, params = _conv_config(draw)
    inputs = {"x": x, "w": w}
    if draw(st.booleans()):
        inputs["b"] = tensor(draw, (cout,), dts=(x.dtype,))

    def build(shapes):
        return (T("x"), T("w"), T("b") if "b" in inputs else None, *_groups(params, x, w, shapes)), {}
    return Draw(op, inputs, build, shard={"x": [0, 1], "w": [0, 1], "b": [0]})


def _conv_agrees(kernel):
    """The CPU convolution_backward reads its operands unchecked (a rank whose gradient is not the
    shape of its forward's output can segfault): refuse such a rank's program, as autograd would
    never make it."""
    def run(g, x, w, bias_sizes, *rest):
        out = A_.convolution(x, w, None, *rest[:-1])
        if out.shape != g.shape or out.numel() == 0 or list(bias_sizes) != [out.shape[1]]:
            raise ValueError("the gradient is not the shape of the forward's output")
        return kernel(g, x, w, bias_sizes, *rest)
    return run


@entry(A + "convolution_backward")
def convolution_backward(draw, op):
    x, w, cout, params = _conv_config(draw)
    out = A_.convolution(x, w, None, *params)
    g = tensor(draw, tuple(out.shape), dts=(x.dtype,))
    mask = [draw(st.booleans()), True, draw(st.booleans())]

    def build(shapes):
        transposed = params[3]
        local = _groups(params, x, w, shapes)
        local_out = shapes["w"][1] * local[5] if transposed else shapes["w"][0]
        return (T("g"), T("x"), T("w"), [local_out], *local, mask), {}
    return Draw(op, {"g": g, "x": x, "w": w}, build, shard={"g": [0, 1], "x": [0, 1], "w": [0, 1]},
                torch_fn=_conv_agrees(aten(op)))


def _pool_args(draw, nsp, x):
    k = [draw(st.integers(1, min(2, x.shape[-nsp + i]))) for i in range(nsp)]
    stride = [draw(st.integers(1, 2)) for _ in range(nsp)]
    pad = [draw(st.integers(0, kk // 2)) for kk in k]
    return k, stride, pad


@entry(A + "avg_pool1d", A + "avg_pool2d", A + "avg_pool3d")
def avg_pool(draw, op):
    nsp = int(op[-2])
    x = _image(draw, nsp, batched=draw(st.booleans()))
    k, stride, pad = _pool_args(draw, nsp, x)
    extra = (draw(st.booleans()), draw(st.booleans()))
    if nsp > 1 and draw(st.booleans()):
        extra += (draw(st.sampled_from([None, 3])),)
    return Draw(op, {"x": x}, (T("x"), k, stride, pad) + extra)


@entry(A + "max_pool2d_with_indices", A + "max_pool3d_with_indices")
def max_pool(draw, op):
    nsp = int(op[-15])
    x = _image(draw, nsp, batched=draw(st.booleans()))
    k, stride, pad = _pool_args(draw, nsp, x)
    x = x + torch.arange(x.numel()).reshape(x.shape).to(x.dtype) * 1e-3  # distinct: the argmax is unique
    return Draw(op, {"x": x}, (T("x"), k, stride, pad, [1] * nsp, draw(st.booleans())))


@entry(A + "adaptive_avg_pool1d", A + "_adaptive_avg_pool2d", A + "_adaptive_avg_pool3d")
def adaptive_avg_pool(draw, op):
    nsp = 1 if "1d" in op else int(op[-2])
    x = _image(draw, nsp, lo=1, batched=draw(st.booleans()))
    return Draw(op, {"x": x}, (T("x"), [_side(draw, 1, 4) for _ in range(nsp)]))


def _planes_agree(kernel):
    """Pooling backwards read the gradient (and indices) as if their batch and channel dims were
    the input's (a rank whose shards differ reads out of bounds): refuse such a rank's program."""
    def run(g, x, *rest):
        tensors = [g, x] + [r for r in rest if isinstance(r, torch.Tensor)]
        if len({t.shape[:-2] for t in tensors}) > 1 or (len(tensors) > 2 and tensors[2].shape != g.shape):
            raise ValueError("the gradient's planes are not the input's")
        return kernel(g, x, *rest)
    return run


@entry(A + "avg_pool2d_backward")
def avg_pool2d_backward(draw, op):
    x = _image(draw, 2)
    k, stride, pad = _pool_args(draw, 2, x)
    extra = (False, draw(st.booleans()), draw(st.sampled_from([None, 3])))
    g = tensor(draw, tuple(A_.avg_pool2d(x, k, stride, pad, *extra).shape), dts=(x.dtype,))
    return Draw(op, {"g": g, "x": x}, (T("g"), T("x"), k, stride, pad) + extra,
                shard={"g": [0, 1], "x": [0, 1]}, torch_fn=_planes_agree(aten(op)), empty_ok=False)


@entry(A + "_adaptive_avg_pool2d_backward")
def adaptive_avg_pool2d_backward(draw, op):
    x = _image(draw, 2, lo=1)
    g = tensor(draw, tuple(A_._adaptive_avg_pool2d(x, [_side(draw, 1, 3)] * 2).shape), dts=(x.dtype,))
    return Draw(op, {"g": g, "x": x}, (T("g"), T("x")), torch_fn=_planes_agree(aten(op)), empty_ok=False)


@entry(A + "max_pool2d_with_indices_backward")
def max_pool2d_backward(draw, op):
    x = _image(draw, 2)
    x = x + torch.arange(x.numel()).reshape(x.shape).to(x.dtype) * 1e-3
    k, stride, pad = _pool_args(draw, 2, x)
    out, idx = A_.max_pool2d_with_indices(x, k, stride, pad, [1, 1], False)
    g = tensor(draw, tuple(out.shape), dts=(x.dtype,))
    return Draw(op, {"g": g, "x": x, "idx": idx}, (T("g"), T("x"), k, stride, pad, [1, 1], False, T("idx")),
                shard={"g": [0, 1], "x": [0, 1], "idx": [0, 1]}, torch_fn=_planes_agree(aten(op)), empty_ok=False)


@entry(A + "upsample_bilinear2d")
def upsample_bilinear2d(draw, op):
    x = _image(draw, 2, lo=1, batched=True)
    return Draw(op, {"x": x}, (T("x"), [_side(draw, 1, 7), _side(draw, 1, 7)], draw(st.booleans())))


@entry(A + "upsample_bilinear2d_backward")
def upsample_bilinear2d_backward(draw, op):
    x = _image(draw, 2, lo=1, batched=True)
    size, align = [_side(draw, 1, 7), _side(draw, 1, 7)], draw(st.booleans())
    g = tensor(draw, tuple(x.shape[:2]) + tuple(size), dts=(x.dtype,))
    return Draw(op, {"g": g}, lambda s: ((T("g"), size, list(s["g"][:2]) + list(x.shape[2:]), align), {}))


@entry(A + "grid_sampler_2d")
def grid_sampler_2d(draw, op):
    x = _image(draw, 2, lo=1)
    grid = tensor(draw, (x.shape[0], _side(draw, 1, 4), _side(draw, 1, 4), 2), dts=(x.dtype,), kind="unit")
    return Draw(op, {"x": x, "grid": grid}, (T("x"), T("grid"), draw(st.sampled_from([0, 1])),
                                              draw(st.sampled_from([0, 1, 2])), draw(st.booleans())))


@entry(A + "col2im")
def col2im(draw, op):
    c, (h, w), k = _side(draw, 1, 3), (_side(draw, 2, 5), _side(draw, 2, 5)), [2, 2]
    blocks = (h - 1) * (w - 1)
    shp = ((_side(draw, 1, 3),) if draw(st.booleans()) else ()) + (c * 4, blocks)
    return Draw(op, {"x": tensor(draw, shp, dts=FL)}, (T("x"), [h, w], k, [1, 1], [0, 0], [1, 1]))


def _norm_params(draw, c, dt, views=True):
    w = tensor(draw, (c,), dts=(dt,), views=views) if draw(st.booleans()) else None
    b = tensor(draw, (c,), dts=(dt,), views=views) if draw(st.booleans()) else None
    return {k: v for k, v in (("w", w), ("b", b)) if v is not None}


def _channels_agree(kernel):
    """The CPU batch norm kernel reads the per-channel tensors as if they had x's channels (a
    rank whose shards differ segfaults): refuse such a rank's program, as a checked entry would."""
    def run(x, *rest):
        if any(isinstance(p, torch.Tensor) and p.shape != (x.shape[1] if x.dim() > 1 else 0,) for p in rest):
            raise ValueError("per-channel tensors do not match the input's channels")
        # copies: in training, _native_batch_norm_legit updates the running statistics in place
        return kernel(x, *[p.clone() if isinstance(p, torch.Tensor) else p for p in rest])
    return run


def _bn_inputs(draw):
    x = _image(draw, draw(st.integers(0, 2)), lo=1)
    c = x.shape[1]
    inputs = {"x": x, **_norm_params(draw, c, x.dtype)}
    inputs["rm"] = tensor(draw, (c,), dts=(x.dtype,))
    inputs["rv"] = tensor(draw, (c,), dts=(x.dtype,), kind="positive")
    args = [T("x"), T("w") if "w" in inputs else None, T("b") if "b" in inputs else None, T("rm"), T("rv")]
    return inputs, args, {k: [0] for k in inputs if k != "x"} | {"x": list(range(x.dim()))}


@entry(A + "_native_batch_norm_legit", A + "_native_batch_norm_legit_functional")
def batch_norm(draw, op):
    inputs, args, shard = _bn_inputs(draw)
    training = True if op.endswith("functional") else draw(st.booleans())
    if not op.endswith("functional") and training and draw(st.booleans()):  # the no_stats overload
        del inputs["rm"], inputs["rv"]
        args = args[:3]
    return Draw(op, inputs, tuple(args) + (training, 0.1, 1e-5), shard=shard, torch_fn=_channels_agree(aten(op)))


@entry(A + "_native_batch_norm_legit_no_training")
def batch_norm_eval(draw, op):
    inputs, args, shard = _bn_inputs(draw)
    return Draw(op, inputs, tuple(args) + (0.1, 1e-5), shard=shard, torch_fn=_channels_agree(aten(op)))


def _gn_inputs(draw):
    group = draw(st.integers(1, 2))
    x = tensor(draw, (_side(draw, 1, 3), group * _side(draw, 1, 2)) + (_side(draw, 1, 4),) * draw(st.integers(0, 2)),
               dts=FL)
    return x.contiguous(), group  # aten.native_group_norm requires a contiguous input (F.group_norm makes it so)


def _gn_sizes(shape):
    return shape[0], shape[1], math.prod(shape[2:])


@entry(A + "native_group_norm")
def group_norm(draw, op):
    x, group = _gn_inputs(draw)
    # contiguous weight and bias: torch's CPU aten.native_group_norm reads an expanded (stride-0) weight
    # wrong (0.83 off the same values made contiguous; F.group_norm is right)
    inputs = {"x": x, **_norm_params(draw, x.shape[1], x.dtype, views=False)}

    def build(shapes):
        w, b = (T(k) if k in inputs else None for k in ("w", "b"))
        return (T("x"), w, b, *_gn_sizes(shapes["x"]), group, 1e-5), {}
    return Draw(op, inputs, build, shard={"x": list(range(x.dim())), "w": [0], "b": [0]})


@entry(A + "native_group_norm_backward")
def group_norm_backward(draw, op):
    x, group = _gn_inputs(draw)
    # contiguous operands: torch's CPU native_group_norm_backward reads them as if contiguous (an expanded
    # grad or weight gives garbage: nan and 1e33 against the same values made contiguous)
    w = tensor(draw, (x.shape[1],), dts=(x.dtype,), views=False)
    _, mean, rstd = A_.native_group_norm(x, w, None, *_gn_sizes(tuple(x.shape)), group, 1e-5)
    g = tensor(draw, tuple(x.shape), dts=(x.dtype,), views=False)
    mask = [draw(st.booleans()), draw(st.booleans()), draw(st.booleans())]

    def build(shapes):
        return (T("g"), T("x"), T("mean"), T("rstd"), T("w"), *_gn_sizes(shapes["x"]), group, mask), {}
    return Draw(op, {"g": g, "x": x, "mean": mean, "rstd": rstd, "w": w}, build,
                shard={"g": [0], "x": [0], "mean": [0], "rstd": [0], "w": []})


@entry(A + "_cdist_forward")
def cdist(draw, op):
    batch = (_side(draw, 1, 2),) if draw(st.booleans()) else ()
    m = _side(draw, 1, 4)
    x1 = tensor(draw, batch + (_side(draw, 1, 5), m), dts=FL)
    x2 = tensor(draw, batch + (_side(draw, 1, 5), m), dts=(x1.dtype,))
    return Draw(op, {"x1": x1, "x2": x2}, (T("x1"), T("x2"), draw(st.sampled_from([1.0, 2.0, 3.0])), None))


@entry(A + "_pdist_forward")
def pdist(draw, op):
    return Draw(op, {"x": tensor(draw, (_side(draw, 1, 5), _side(draw, 1, 4)), dts=FL, views=False)},  # contiguous only
                (T("x"), draw(st.sampled_from([1.0, 2.0]))))


@entry(A + "_embedding_bag")
def embedding_bag(draw, op):
    v, d = _side(draw, 2, 6), _side(draw, 1, 4)
    # float64 only: torch's float32 sum kernel takes a fast path that leaves offset2bag empty (the
    # numerics run at float64); the bags themselves agree at either dtype
    w = tensor(draw, (v, d), dts=(F64,))
    n = _side(draw, 1, 8)
    ids = _ids(draw, (n,), v)
    offsets = torch.tensor(sorted({0} | set(draw(st.lists(st.integers(0, n - 1), max_size=3)))), dtype=torch.int64)
    mode = draw(st.sampled_from([0, 1, 2]))
    inputs = {"w": w, "ids": ids, "off": offsets}
    psw = None
    if mode == 0 and draw(st.booleans()):
        inputs["psw"] = tensor(draw, (n,), dts=(w.dtype,))
        psw = T("psw")
    return Draw(op, inputs, (T("w"), T("ids"), T("off"), False, mode, False, psw),
                shard={"w": [0, 1], "ids": [], "off": [], "psw": []})


@entry(A + "_fft_r2c")
def fft_r2c(draw, op):
    x = tensor(draw, dts=FL, min_dims=1)
    dims = sorted(set(draw(st.lists(st.integers(0, x.dim() - 1), min_size=1, max_size=x.dim()))))
    return Draw(op, {"x": x}, (T("x"), dims, draw(st.sampled_from([0, 1, 2])), draw(st.booleans())))


@entry(A + "_fft_c2r")
def fft_c2r(draw, op):
    re = tensor(draw, dts=(F64,), min_dims=1, views=False)
    d = draw(st.integers(0, re.dim() - 1))
    z = torch.fft.rfft(re, dim=d)
    return Draw(op, {"z": z}, (T("z"), [d], draw(st.sampled_from([0, 1, 2])), re.shape[d]))


@entry(A + "diagonal")
def diagonal(draw, op):
    x = tensor(draw, dts=FL, min_dims=2)
    d1, d2 = draw(st.permutations(range(x.dim())))[:2]
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(-2, 2)), d1, d2))


# ---------------------------------------------------------------- data-dependent and symbolic


@entry(A + "masked_scatter")
def masked_scatter(draw, op):
    x = tensor(draw, dts=FL)
    m = tensor(draw, tuple(x.shape), dts=(torch.bool,))
    return Draw(op, {"x": x, "m": m, "s": tensor(draw, tuple(x.shape), dts=(x.dtype,))}, (T("x"), T("m"), T("s")))


@entry(A + "_local_scalar_dense")
def local_scalar_dense(draw, op):
    return Draw(op, {"x": tensor(draw, (1,) * draw(st.integers(0, 2)), dts=FL)}, (T("x"),))


@entry(A + "resize_")
def resize(draw, op):
    x = tensor(draw, dts=FL, views=False)
    return Draw(op, {"x": x}, lambda shapes: ((T("x"), list(shapes["x"])), {}),
                torch_fn=lambda x, size: x.clone().resize_(size))


@entry(A + "sym_size", A + "sym_numel", A + "sym_stride", A + "sym_storage_offset", A + "sym_is_contiguous")
def sym_queries(draw, op):
    x = tensor(draw, dts=FL, min_dims=1)
    args = (T("x"), 0) if op.endswith(("sym_size", "sym_stride")) else (T("x"),)
    return Draw(op, {"x": x}, args)
