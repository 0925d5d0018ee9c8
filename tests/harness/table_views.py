"""Harness entries: views and shape ops, indexing, losses, attention."""
from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from .core import Draw, T
from . import draws
from .draws import BOOL, F32, F64, I64, NUMERIC, tensor, values
from .table import A, entry


def _reshaped(shp, how):
    """A reshape of `shp` described relative to it: merge two dims, split one, or flatten."""
    kind, d = how
    shp = list(shp)
    if kind == "flatten" or not shp:
        return [-1]
    d %= len(shp)
    if kind == "merge" and d + 1 < len(shp):
        return shp[:d] + [shp[d] * shp[d + 1]] + shp[d + 2:]
    if kind == "split" and shp[d] % 2 == 0:
        return shp[:d] + [2, shp[d] // 2] + shp[d + 1:]
    return shp[:d] + [1] + shp[d:]  # insert a unit dim


@entry(A + "view", A + "_unsafe_view", A + "reshape", A + "view_copy")
def view(draw, op):
    x = tensor(draw, dts=NUMERIC, views=op.endswith("reshape"))
    how = (draw(st.sampled_from(["merge", "split", "flatten", "unit"])), draw(st.integers(0, 3)))
    return Draw(op, {"x": x}, lambda s: ((T("x"), _reshaped(s["x"], how)), {}))


@entry(A + "_reshape_alias")
def reshape_alias(draw, op):
    x = tensor(draw, dts=(F64,), views=False)
    how = (draw(st.sampled_from(["merge", "split", "unit"])), draw(st.integers(0, 3)))

    def args(s):
        size = _reshaped(s["x"], how)
        stride = [int(np.prod(size[i + 1:])) for i in range(len(size))]
        return (T("x"), size, stride), {}
    return Draw(op, {"x": x}, args)


@entry(A + "permute")
def permute(draw, op):
    x = tensor(draw, dts=NUMERIC)
    return Draw(op, {"x": x}, (T("x"), draw(st.permutations(range(x.dim())))))


@entry(A + "transpose")
def transpose(draw, op):
    x = tensor(draw, dts=NUMERIC)
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(-x.dim(), x.dim() - 1)), draw(st.integers(0, x.dim() - 1))))


@entry(A + "t", A + "numpy_T")
def t(draw, op):
    return Draw(op, {"x": tensor(draw, dts=NUMERIC, max_dims=2 if op.endswith(".t") else 3)}, (T("x"),))


@entry(A + "unsqueeze")
def unsqueeze(draw, op):
    x = tensor(draw, dts=NUMERIC)
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(-x.dim() - 1, x.dim()))))


@entry(A + "squeeze")
def squeeze(draw, op):
    x = tensor(draw, dts=NUMERIC, min_side=1, max_side=2)
    form = draw(st.sampled_from(["all", "dim", "dims"]))
    if form == "all":
        return Draw(op, {"x": x}, (T("x"),))
    if form == "dim":
        return Draw(op, {"x": x}, (T("x"), draw(st.integers(0, x.dim() - 1))))
    return Draw(op, {"x": x}, (T("x"), sorted(set(draw(st.lists(st.integers(0, x.dim() - 1), min_size=1))))))


@entry(A + "expand")
def expand(draw, op):
    x = tensor(draw, dts=NUMERIC, min_side=1, max_side=2)
    new = [3 if s == 1 and draw(st.booleans()) else (-1 if draw(st.booleans()) else s) for s in x.shape]
    lead = list(draw(st.lists(st.integers(1, 3), max_size=1)))
    # a rank whose local dim is not 1 keeps it (-1): the local program expands what it has
    return Draw(op, {"x": x}, lambda s: ((T("x"), lead + [n if s["x"][i] == 1 else -1 for i, n in enumerate(new)]), {}))


def _bounds(draw):
    start = draw(st.sampled_from([None, 0, 1, 2, -2]))
    end = draw(st.sampled_from([None, 3, 5, -1, 2 ** 62]))
    return start, end, draw(st.sampled_from([1, 1, 2]))


@entry(A + "slice")
def slice_(draw, op):
    x = tensor(draw, dts=NUMERIC)
    start, end, step = _bounds(draw)
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(0, x.dim() - 1)), start, end, step))


@entry(A + "narrow")
def narrow(draw, op):
    x = tensor(draw, dts=NUMERIC)
    d = draw(st.integers(0, x.dim() - 1))
    start = draw(st.integers(0, x.shape[d]))
    return Draw(op, {"x": x}, lambda s: ((T("x"), d, min(start, s["x"][d]), (s["x"][d] - min(start, s["x"][d])) // 2), {}))


@entry(A + "select")
def select(draw, op):
    x = tensor(draw, dts=NUMERIC)
    d = draw(st.integers(0, x.dim() - 1))
    i = draw(st.integers(-x.shape[d], x.shape[d] - 1))
    return Draw(op, {"x": x}, (T("x"), d, i))


@entry(A + "split", A + "split_with_sizes", A + "chunk")
def split(draw, op):
    x = tensor(draw, dts=NUMERIC)
    d = draw(st.integers(0, x.dim() - 1))
    k = draw(st.integers(1, 4))
    if op.endswith("split_with_sizes"):
        def args(s):
            cut = sorted({min(c, s["x"][d]) for c in (1, 3)})
            return (T("x"), list(np.diff([0] + cut + [s["x"][d]]).tolist()), d), {}
        return Draw(op, {"x": x}, args)
    return Draw(op, {"x": x}, (T("x"), k, d))


@entry(A + "unbind")
def unbind(draw, op):
    x = tensor(draw, dts=NUMERIC)
    return Draw(op, {"x": x}, (T("x"), draw(st.integers(0, x.dim() - 1))))


@entry(A + "cat", A + "stack")
def cat(draw, op):
    x = tensor(draw, dts=(F64, I64))
    d = draw(st.integers(0, x.dim() - 1))
    shp = list(x.shape)
    if op.endswith("cat"):
        shp[d] = draw(st.integers(0, 3))
    y = tensor(draw, shp, dts=(x.dtype,))
    return Draw(op, {"x": x, "y": y}, ([T("x"), T("y")], d if op.endswith("cat") else draw(st.integers(0, x.dim()))))


@entry(A + "repeat")
def repeat(draw, op):
    x = tensor(draw, dts=NUMERIC, max_side=3)
    reps = list(draw(st.lists(st.integers(1, 3), min_size=x.dim(), max_size=x.dim() + 1)))
    return Draw(op, {"x": x}, (T("x"), reps))


@entry(A + "as_strided_scatter")
def as_strided_scatter(draw, op):
    base = tensor(draw, (4, 3), dts=(F64,), views=False)
    src = tensor(draw, (2, 3), dts=(F64,), views=False)
    return Draw(op, {"base": base, "src": src}, (T("base"), T("src"), [2, 3], [3, 1], 3),
                shard={"base": [], "src": []})


@entry(A + "slice_scatter")
def slice_scatter(draw, op):
    base = tensor(draw, dts=(F64, I64))
    d = draw(st.integers(0, base.dim() - 1))
    size = base.shape[d]
    lo = draw(st.integers(0, size))
    hi = draw(st.integers(lo, size))
    shp = list(base.shape)
    shp[d] = hi - lo
    src = tensor(draw, shp, dts=(base.dtype,))
    return Draw(op, {"base": base, "src": src}, (T("base"), T("src"), d, lo, hi, 1),
                shard={"base": [i for i in range(base.dim()) if i != d], "src": [i for i in range(base.dim()) if i != d]})


@entry(A + "slice_backward")
def slice_backward(draw, op):
    full = list(tensor(draw, dts=(F64,)).shape)
    d = draw(st.integers(0, len(full) - 1))
    lo = draw(st.integers(0, full[d]))
    hi = draw(st.integers(lo, full[d]))
    shp = list(full)
    shp[d] = hi - lo
    g = tensor(draw, shp, dts=(F64,))
    others = [i for i in range(len(full)) if i != d]
    return Draw(op, {"g": g}, lambda s: ((T("g"), [s["g"][i] if i != d else full[d] for i in range(len(full))],
                                          d, lo, hi, 1), {}), shard={"g": others})


# ---------------------------------------------------------------- indexing

def _ids(draw, shp, n):
    g = np.random.default_rng(draw(st.integers(0, 2 ** 31 - 1)))
    return torch.from_numpy(g.integers(0, n, size=shp).astype(np.int64))


@entry(A + "embedding")
def embedding(draw, op):
    v, h = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    w = tensor(draw, (v, h), dts=(F64, F32))
    ids = _ids(draw, tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))), v)
    return Draw(op, {"w": w, "ids": ids}, (T("w"), T("ids")), shard={"w": [1], "ids": None})


@entry(A + "index")
def index(draw, op):
    x = tensor(draw, dts=(F64, I64))
    form = draw(st.sampled_from(["ids", "mask", "rows", "second"]))
    if form == "mask":
        m = values(draw, tuple(x.shape[:1]), BOOL)
        return Draw(op, {"x": x, "m": m}, (T("x"), [T("m")]), shard={"x": [], "m": []})
    if form == "rows" and x.dim() == 2:
        ar = torch.arange(x.shape[0])
        ids = _ids(draw, (x.shape[0],), x.shape[1])
        return Draw(op, {"x": x, "ar": ar, "ids": ids}, (T("x"), [T("ar"), T("ids")]), shard={"x": [1], "ar": [], "ids": []})
    ids = _ids(draw, tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))), x.shape[0])
    if form == "second" and x.dim() >= 2:
        ids = _ids(draw, ids.shape, x.shape[1])
        return Draw(op, {"x": x, "ids": ids}, (T("x"), [None, T("ids")]), shard={"x": [0], "ids": None})
    return Draw(op, {"x": x, "ids": ids}, (T("x"), [T("ids")]), shard={"x": list(range(1, x.dim())), "ids": None})


@entry(A + "index_put")
def index_put(draw, op):
    x = tensor(draw, dts=(F64,))
    form = draw(st.sampled_from(["mask", "mask_value", "ids", "rows"]))
    acc = draw(st.booleans())
    if form.startswith("mask"):
        m = values(draw, tuple(x.shape[:1]), BOOL)
        v = torch.tensor(2.5, dtype=x.dtype) if form == "mask_value" else \
            tensor(draw, (1,) + tuple(x.shape[1:]), dts=(x.dtype,))
        return Draw(op, {"x": x, "m": m, "v": v}, (T("x"), [T("m")], T("v"), False), shard={"x": [], "m": [], "v": []})
    if form == "rows" and x.dim() == 2:
        ar = torch.arange(x.shape[0])
        ids = _ids(draw, (x.shape[0],), x.shape[1])
        v = tensor(draw, (x.shape[0],), dts=(x.dtype,))
        return Draw(op, {"x": x, "ar": ar, "ids": ids, "v": v}, (T("x"), [T("ar"), T("ids")], T("v"), acc),
                    shard={"x": [], "ar": [], "ids": [], "v": []})
    ids = _ids(draw, (draw(st.integers(1, 3)),), x.shape[0])
    v = tensor(draw, (ids.shape[0],) + tuple(x.shape[1:]), dts=(x.dtype,))
    return Draw(op, {"x": x, "ids": ids, "v": v}, (T("x"), [T("ids")], T("v"), True),
                shard={"x": [], "ids": [], "v": []})


@entry(A + "gather")
def gather(draw, op):
    x = tensor(draw, dts=(F64, I64), min_dims=2)
    d = draw(st.integers(0, x.dim() - 1))
    shp = list(x.shape)
    shp[d] = draw(st.sampled_from([1, 2]))
    idx = _ids(draw, tuple(shp), x.shape[d])
    others = [i for i in range(x.dim()) if i != d]
    return Draw(op, {"x": x, "idx": idx}, (T("x"), d, T("idx")), shard={"x": others, "idx": others})


@entry(A + "index_select")
def index_select(draw, op):
    x = tensor(draw, dts=(F64, I64))
    d = draw(st.integers(0, x.dim() - 1))
    idx = _ids(draw, (draw(st.integers(1, 4)),), x.shape[d])
    return Draw(op, {"x": x, "idx": idx}, (T("x"), d, T("idx")),
                shard={"x": [i for i in range(x.dim()) if i != d], "idx": [0]})


@entry(A + "embedding_dense_backward")
def embedding_backward(draw, op):
    v, h = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    ids = _ids(draw, tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))), v)
    g = tensor(draw, tuple(ids.shape) + (h,), dts=(F64,))
    pad = draw(st.sampled_from([-1, 0]))
    rows = list(range(ids.dim()))
    return Draw(op, {"g": g, "ids": ids}, (T("g"), T("ids"), v, pad, False), shard={"g": rows + [ids.dim()], "ids": rows})


# ---------------------------------------------------------------- losses

def _nll_inputs(draw):
    n, c = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    logp = torch.log_softmax(tensor(draw, (n, c), dts=(F64, F32), views=False), -1)
    target = _ids(draw, (n,), c)
    if not draws.MODE["rule"] and draw(st.booleans()):  # some targets ignored (the rule assumes none: stated)
        target = torch.where(torch.from_numpy(np.arange(n) % 3 == 1), torch.tensor(-100), target)
    return logp, target


@entry(A + "nll_loss_forward")
def nll_forward(draw, op):
    logp, target = _nll_inputs(draw)
    red = draw(st.sampled_from([0, 1, 2]))
    return Draw(op, {"logp": logp, "target": target}, (T("logp"), T("target"), None, red, -100),
                shard={"logp": [0], "target": [0]})


@entry(A + "nll_loss_backward")
def nll_backward(draw, op):
    logp, target = _nll_inputs(draw)
    red = draw(st.sampled_from([0, 1, 2]))
    g = tensor(draw, (logp.shape[0],) if red == 0 else (), dts=(logp.dtype,))
    total = torch.tensor(float((target != -100).sum()), dtype=logp.dtype)
    return Draw(op, {"g": g, "logp": logp, "target": target, "total": total},
                (T("g"), T("logp"), T("target"), None, red, -100, T("total")),
                shard={"g": [0], "logp": [0], "target": [0], "total": []})


# ---------------------------------------------------------------- attention

def _qkv(draw):
    b, h, s, e = (draw(st.integers(1, 3)) for _ in range(4))
    sk = s if draw(st.booleans()) else draw(st.integers(1, 4))
    dt = draw(st.sampled_from([F64, F32]))
    q = tensor(draw, (b, h, s, e), dts=(dt,), views=False)
    k = tensor(draw, (b, h, sk, e), dts=(dt,), views=False)
    v = tensor(draw, (b, h, sk, e), dts=(dt,), views=False)
    causal = draw(st.booleans()) and sk == s
    return q, k, v, causal


SDPA_SHARD = {"q": [0, 1, 2], "k": [0, 1, 2], "v": [0, 1, 2]}


def _guarded(kernel):
    """The CPU flash kernels die of SIGFPE on mismatched batch/head counts or empty tensors
    (a rank's local program that torch would reject anyway): refuse those shapes first."""
    def run(*args, **kwargs):
        g, q, k, v = (args[0],) + args[1:4] if "backward" in str(kernel) else (None,) + args[:3]
        ts = [t for t in (g, q, k, v) if t is not None]
        if any(t.numel() == 0 for t in ts) or q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3]:
            raise ValueError("q, k, v do not fit together on this rank")
        if g is not None and (g.shape != q.shape or any(t.shape[:3] != q.shape[:3] for t in args[4:6])):
            raise ValueError("gradients do not fit on this rank")
        return kernel(*args, **kwargs)
    return run


@entry(A + "scaled_dot_product_attention")
def sdpa(draw, op):
    q, k, v, causal = _qkv(draw)
    return Draw(op, {"q": q, "k": k, "v": v}, (T("q"), T("k"), T("v")), {"is_causal": causal}, shard=SDPA_SHARD, empty_ok=False,
                torch_fn=_guarded(torch.ops.aten.scaled_dot_product_attention))


@entry(A + "_scaled_dot_product_flash_attention_for_cpu", A + "_scaled_dot_product_efficient_attention",
       A + "_scaled_dot_product_flash_attention")
def sdpa_cpu(draw, op):
    """The efficient / flash kernels are CUDA-only; they share one declaration (signature
    (q, k, v, dropout_p, is_causal, ...)) with the CPU flash kernel, which is the one run."""
    q, k, v, causal = _qkv(draw)
    return Draw(op, {"q": q, "k": k, "v": v}, (T("q"), T("k"), T("v"), 0.0, causal), shard=SDPA_SHARD, empty_ok=False,
                torch_fn=_guarded(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu))


@entry(A + "_scaled_dot_product_flash_attention_for_cpu_backward")
def sdpa_backward(draw, op):
    """With or without an explicit additive mask (as Hugging Face passes it: [b, 1, s, sk],
    broadcast over the heads; finite, so no query row is wholly masked)."""
    q, k, v, causal = _qkv(draw)
    inputs, kwargs = {"q": q, "k": k, "v": v}, {}
    shard = dict(SDPA_SHARD, g=[0, 1, 2], out=[0, 1, 2], lse=[0, 1, 2])
    if draw(st.booleans()):
        b, _, s, _ = q.shape
        inputs["m"] = tensor(draw, (b, 1, s, k.shape[2]), dts=(q.dtype,), views=False)
        kwargs, shard["m"] = {"attn_mask": T("m")}, [0, 2, 3]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=inputs.get("m"))
    inputs.update(g=tensor(draw, out.shape, dts=(q.dtype,), views=False), out=out, lse=lse)
    return Draw(op, inputs, (T("g"), T("q"), T("k"), T("v"), T("out"), T("lse"), 0.0, causal), kwargs, shard=shard,
                empty_ok=False, torch_fn=_guarded(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward))
