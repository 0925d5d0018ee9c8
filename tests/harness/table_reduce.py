"""Harness entries: reductions, row-wise ops, norms, contractions, creation."""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from .core import Draw, T, aten, same_shapes
from .draws import F32, F64, FLOATS, I64, NUMERIC, tensor
from .table import A, entry


def _dims(draw, nd):
    dims = sorted(set(draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd))))
    return [d - nd if draw(st.booleans()) else d for d in dims]


@entry(A + "sum", A + "mean")
def sum_mean(draw, op):
    x = tensor(draw, dts=FLOATS + ((I64,) if op.endswith("sum") else ()))
    if draw(st.booleans()) and op.endswith("sum"):
        return Draw(op, {"x": x}, (T("x"),))
    return Draw(op, {"x": x}, (T("x"), _dims(draw, x.dim()), draw(st.booleans())))


@entry(A + "amax", A + "amin")
def extreme(draw, op):
    x = tensor(draw, dts=NUMERIC)
    return Draw(op, {"x": x}, (T("x"), _dims(draw, x.dim()), draw(st.booleans())))


@entry(A + "max")
def max_(draw, op):
    x = tensor(draw, dts=(F64, F32, I64), kind="any")
    x = x + torch.arange(x.numel()).reshape(x.shape).to(x.dtype) * 1e-3 if x.is_floating_point() else x * 1000 + \
        torch.arange(x.numel()).reshape(x.shape)  # distinct values: the index of the max is unique
    if draw(st.booleans()):
        return Draw(op, {"x": x}, (T("x"),))
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(-x.dim(), x.dim() - 1)), draw(st.booleans())))


@entry(A + "argmax")
def argmax(draw, op):
    x = tensor(draw, dts=(F64, F32), views=False)
    x = x + torch.arange(x.numel()).reshape(x.shape).to(x.dtype) * 1e-3
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(-x.dim(), x.dim() - 1)), draw(st.booleans())))


@entry(A + "var", A + "var_mean")
def var(draw, op):
    x = tensor(draw, dts=(F64, F32))
    return Draw(op, {"x": x}, (T("x"), _dims(draw, x.dim())),
                {"correction": draw(st.sampled_from([0, 1])), "keepdim": draw(st.booleans())})


@entry(A + "_softmax", A + "_log_softmax", A + "_safe_softmax", A + "softmax", A + "log_softmax")
def softmax(draw, op):
    x = tensor(draw, dts=(F64, F32))
    dim = draw(st.integers(-x.dim(), x.dim() - 1))
    if op.endswith("._softmax") or op.endswith("._log_softmax"):
        return Draw(op, {"x": x}, (T("x"), dim, False), empty_ok=False)
    return Draw(op, {"x": x}, (T("x"), dim), empty_ok=False)


@entry(A + "_softmax_backward_data", A + "_log_softmax_backward_data")
def softmax_backward(draw, op):
    g = tensor(draw, dts=(F64, F32))
    dim = draw(st.integers(-g.dim(), g.dim() - 1))
    y = torch.softmax(tensor(draw, g.shape, dts=(g.dtype,)), dim)
    if "log" in op:
        y = y.log()
    return Draw(op, {"g": g, "y": y}, (T("g"), T("y"), dim, g.dtype), empty_ok=False, torch_fn=same_shapes(aten(op)))


def _norm_inputs(draw, bias=True):
    x = tensor(draw, dts=(F64, F32), min_dims=2)
    k = draw(st.integers(1, min(2, x.dim())))
    nshape = list(x.shape[x.dim() - k:])
    w = tensor(draw, nshape, dts=(x.dtype,)) if draw(st.booleans()) else None
    b = tensor(draw, nshape, dts=(x.dtype,)) if bias and w is not None and draw(st.booleans()) else None
    return x, k, w, b


def _with(inputs: dict, name, t):
    if t is not None:
        inputs[name] = t
        return T(name)
    return None


@entry(A + "native_layer_norm", A + "layer_norm")
def layer_norm(draw, op):
    x, k, w, b = _norm_inputs(draw)
    inputs = {"x": x}
    wt, bt = _with(inputs, "w", w), _with(inputs, "b", b)
    nd = x.dim()
    return Draw(op, inputs, lambda s: ((T("x"), list(s["x"][nd - k:]), wt, bt, 1e-5), {}),
                shard={"x": list(range(nd - k)), "w": [], "b": []}, empty_ok=False)


@entry(A + "_fused_rms_norm", A + "rms_norm")
def rms_norm(draw, op):
    x, k, w, _ = _norm_inputs(draw, bias=False)
    inputs = {"x": x}
    wt = _with(inputs, "w", w)
    nd = x.dim()
    # eps=None is the input dtype's epsilon; the float64 numerics take float32's (a reference-only gap)
    eps = draw(st.sampled_from([1e-6, None])) if op.endswith(".rms_norm") and x.dtype == F32 else 1e-6
    return Draw(op, inputs, lambda s: ((T("x"), list(s["x"][nd - k:]), wt, eps), {}),
                shard={"x": list(range(nd - k)), "w": []}, empty_ok=False)


@entry(A + "native_layer_norm_backward")
def layer_norm_backward(draw, op):
    x, k, w, b = _norm_inputs(draw)
    nd = x.dim()
    nshape = list(x.shape[nd - k:])
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, nshape, w, b, 1e-5)
    g = tensor(draw, x.shape, dts=(x.dtype,))
    inputs = {"g": g, "x": x, "mean": mean, "rstd": rstd}
    wt, bt = _with(inputs, "w", w), _with(inputs, "b", b)
    mask = [True, wt is not None, bt is not None]
    rows = list(range(nd - k))
    return Draw(op, inputs, lambda s: ((T("g"), T("x"), list(s["x"][nd - k:]), T("mean"), T("rstd"), wt, bt, mask), {}),
                shard={"g": rows, "x": rows, "mean": rows, "rstd": rows, "w": [], "b": []}, empty_ok=False,
                torch_fn=_rows_agree(aten(op)))


def _rows_agree(kernel):
    """The CPU kernel reads g, x, mean and rstd as if their rows agreed: refuse a rank's
    program where they do not (torch's checked entry points would)."""
    def run(g, x, shape, mean, rstd, *rest):
        lead = x.dim() - len(shape)
        if g.shape != x.shape or mean.shape[:lead] != x.shape[:lead] or rstd.shape[:lead] != x.shape[:lead]:
            raise ValueError("rows differ")
        return kernel(g, x, shape, mean, rstd, *rest)
    return run


# ---------------------------------------------------------------- contractions

def _mat(draw, shp, dt):
    return tensor(draw, shp, dts=(dt,))


def _dims_mnk(draw):
    return [draw(st.integers(1, 5)) for _ in range(3)]


@entry(A + "mm")
def mm(draw, op):
    m, n, k = _dims_mnk(draw)
    dt = draw(st.sampled_from([F64, F32]))
    return Draw(op, {"a": _mat(draw, (m, k), dt), "b": _mat(draw, (k, n), dt)}, (T("a"), T("b")))


@entry(A + "bmm")
def bmm(draw, op):
    m, n, k = _dims_mnk(draw)
    bsz = draw(st.integers(1, 4))
    dt = draw(st.sampled_from([F64, F32]))
    return Draw(op, {"a": _mat(draw, (bsz, m, k), dt), "b": _mat(draw, (bsz, k, n), dt)}, (T("a"), T("b")))


@entry(A + "matmul")
def matmul(draw, op):
    m, n, k = _dims_mnk(draw)
    dt = draw(st.sampled_from([F64, F32]))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    b_shape = draw(st.sampled_from([(k, n), lead + (k, n), (k,)]))
    a_shape = draw(st.sampled_from([lead + (m, k), (k,)])) if len(b_shape) != 1 else lead + (m, k)
    return Draw(op, {"a": _mat(draw, a_shape, dt), "b": _mat(draw, b_shape, dt)}, (T("a"), T("b")))


@entry(A + "addmm", A + "baddbmm")
def addmm(draw, op):
    m, n, k = _dims_mnk(draw)
    dt = draw(st.sampled_from([F64, F32]))
    lead = (draw(st.integers(1, 3)),) if op.endswith("baddbmm") else ()
    c_shape = draw(st.sampled_from([lead + (m, n), (n,), lead + (1, n)]))
    kw = {}
    if draw(st.booleans()):
        kw = {"beta": draw(st.sampled_from([0, 1, 2])), "alpha": draw(st.sampled_from([1, -1, 0.5]))}
    return Draw(op, {"c": _mat(draw, c_shape, dt), "a": _mat(draw, lead + (m, k), dt),
                     "b": _mat(draw, lead + (k, n), dt)}, (T("c"), T("a"), T("b")), kw)


@entry(A + "linear")
def linear(draw, op):
    m, n, k = _dims_mnk(draw)
    dt = draw(st.sampled_from([F64, F32]))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
    inputs = {"x": _mat(draw, lead + (m, k), dt), "w": _mat(draw, (n, k), dt)}
    if draw(st.booleans()):
        inputs["b"] = _mat(draw, (n,), dt)
        return Draw(op, inputs, (T("x"), T("w"), T("b")))
    return Draw(op, inputs, (T("x"), T("w")))


# ---------------------------------------------------------------- creation

def _size(draw):
    return list(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))


@entry(A + "full", A + "zeros", A + "ones")
def creation(draw, op):
    size = _size(draw)
    dt = draw(st.sampled_from([F64, F32, I64]))
    if op.endswith("full"):
        return Draw(op, {}, (size, draw(st.sampled_from([0, 1.5, -2]))), {"dtype": dt})
    return Draw(op, {}, (size,), {"dtype": dt})


@entry(A + "zeros_like", A + "ones_like", A + "full_like")
def like(draw, op):
    x = tensor(draw, dts=NUMERIC)
    if op.endswith("full_like"):
        return Draw(op, {"x": x}, (T("x"), draw(st.sampled_from([0, 2, -1, 1.5, -2.5]))))
    return Draw(op, {"x": x}, (T("x"),))


@entry(A + "new_zeros", A + "new_ones")
def new_fill(draw, op):
    x = tensor(draw, dts=NUMERIC)
    return Draw(op, {"x": x}, (T("x"), _size(draw)))


@entry(A + "scalar_tensor")
def scalar_tensor(draw, op):
    return Draw(op, {}, (draw(st.sampled_from([0.0, 3.0, -1.5])),), {"dtype": draw(st.sampled_from([F64, F32]))})


@entry(A + "arange")
def arange(draw, op):
    start, n, step = draw(st.integers(-3, 3)), draw(st.integers(1, 6)), draw(st.sampled_from([1, 2, 3]))
    form = draw(st.sampled_from(["end", "start_end", "step"]))
    args = {"end": (n,), "start_end": (start, start + n), "step": (start, start + n * step, step)}[form]
    return Draw(op, {}, args, {"dtype": draw(st.sampled_from([I64, F64]))})


@entry(A + "empty", A + "empty_like", A + "new_empty", A + "empty_strided", A + "new_empty_strided")
def empty(draw, op):
    """Uninitialized memory: the harness compares shapes only (values are garbage)."""
    size = _size(draw)
    x = tensor(draw, dts=(F64,))
    strides = [1] * len(size)
    for i in range(len(size) - 2, -1, -1):
        strides[i] = strides[i + 1] * size[i + 1]
    args = {"empty": (size,), "empty_like": (T("x"),), "new_empty": (T("x"), size),
            "empty_strided": (size, strides), "new_empty_strided": (T("x"), size, strides)}[op[5:]]
    inputs = {"x": x} if any(isinstance(a, T) for a in args) else {}
    d = Draw(op, inputs, args)
    d.values = False
    return d
