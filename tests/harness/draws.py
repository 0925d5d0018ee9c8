"""Hypothesis strategies for the harness: shapes, values, dtypes, strided views, layouts."""
from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from shardproof.relations.spec import Interleaved, Padded, Partial, Replicate, Shard, Slices

F64, F32, BF16, I64, BOOL = torch.float64, torch.float32, torch.bfloat16, torch.int64, torch.bool
FLOATS = (F64, F32, BF16)
NUMERIC = (F64, F32, BF16, I64)

# the rule check compares partial sums with single-device sums: exact dtypes keep it sharp
RULE_DTYPES = {F64, I64, BOOL}
MODE = {"rule": False}  # set by the rule tests: draw only exact dtypes


def shape(draw, min_dims=1, max_dims=3, min_side=1, max_side=6) -> tuple:
    return tuple(draw(st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims)))


def dtype(draw, allowed=FLOATS):
    if MODE["rule"]:
        exact = [d for d in allowed if d in RULE_DTYPES]
        allowed = exact or allowed
    return draw(st.sampled_from(list(allowed)))


def values(draw, shp, dt, kind="any") -> torch.Tensor:
    """Values with negatives, zeros and some large entries; `kind`: any, positive, unit
    (in (-1, 1)), small (integers in [-9, 9])."""
    seed = draw(st.integers(0, 2 ** 31 - 1))
    g = np.random.default_rng(seed)
    n = int(np.prod(shp)) if len(shp) else 1
    if dt == BOOL:
        return torch.from_numpy(g.integers(0, 2, size=shp).astype(bool))
    if dt == I64:
        lo = 1 if kind == "positive" else -9
        return torch.from_numpy(g.integers(lo, 10, size=shp).astype(np.int64))
    base = g.integers(-9, 10, size=n).astype(np.float64)
    style = draw(st.sampled_from(["int", "normal", "mixed"]))
    if style != "int":
        base = g.standard_normal(n) * 3
    if style == "mixed" and kind == "any":
        pick = g.random(n)
        base = np.where(pick < 0.15, 0.0, base)
        base = np.where(pick > 0.9, base * 1e3, base)
    if kind == "positive":
        base = np.abs(base) + 0.5
    elif kind == "unit":
        base = np.tanh(base) * 0.95
    elif kind == "small":
        base = np.round(np.clip(base, -9, 9))
    return torch.from_numpy(base.reshape(shp)).to(dt)


def strided(draw, x: torch.Tensor) -> torch.Tensor:
    """The same values as a transposed, offset or expanded view (or as they are)."""
    how = draw(st.sampled_from(["plain", "plain", "transposed", "offset", "expanded"]))
    if how == "transposed" and x.dim() >= 2:
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if how == "offset" and x.numel():
        buf = torch.zeros(x.numel() + 3, dtype=x.dtype)
        view = buf[3:].view(x.shape)
        view.copy_(x)
        return view
    if how == "expanded" and x.dim() >= 1:
        d = draw(st.integers(0, x.dim() - 1))
        return x.narrow(d, 0, 1).expand(x.shape) if x.shape[d] else x
    return x


def tensor(draw, shp=None, dts=FLOATS, kind="any", views=True, **shape_kw) -> torch.Tensor:
    shp = shape(draw, **shape_kw) if shp is None else tuple(shp)
    x = values(draw, shp, dtype(draw, dts), kind)
    return strided(draw, x) if views and not MODE["rule"] else x


# ---------------------------------------------------------------- layouts

def _cuts(draw, size, world):
    pts = sorted(draw(st.lists(st.integers(0, size), min_size=world - 1, max_size=world - 1)))
    b = [0] + pts + [size]
    return {r: (b[r], b[r + 1]) for r in range(world)}


def layout(draw, x: torch.Tensor, world: int, dims=None, partial_ok=True):
    """A relation of a local tensor to `x`: Replicate, Shard (even or not), uneven or
    overlapping Slices, Interleaved segments (with repeats: fewer blocks than ranks), Partial,
    Padded (a Shard of the tensor with blocks repeated in place and zeros appended)."""
    dims = list(range(x.dim())) if dims is None else [d % max(x.dim(), 1) for d in dims]
    kinds = ["replicate"] + (["shard", "slices", "interleaved", "padded"] if dims and x.dim() else [])
    if partial_ok and x.dtype == F64:
        kinds.append("partial")
    kind = draw(st.sampled_from(kinds))
    if kind == "replicate":
        return Replicate()
    if kind == "partial":
        return Partial("sum")
    d = draw(st.sampled_from(dims))
    size = x.shape[d]
    if kind == "shard":
        return Shard(d)
    if kind == "padded":
        unit = draw(st.sampled_from([u for u in (1, 2) if size % u == 0]))
        repeat = draw(st.integers(1, 2))
        extra = draw(st.integers(0 if repeat > 1 else 1, 3))
        return Padded(Shard(d), d, ((size, size * repeat + extra, repeat),), unit)
    if kind == "slices":
        if draw(st.booleans()):
            return Slices(d, _cuts(draw, size, world))
        ranges = {}
        for r in range(world):  # overlapping / repeated ranges
            lo = draw(st.integers(0, size))
            ranges[r] = (lo, draw(st.integers(lo, size)))
        return Slices(d, ranges)
    nseg = draw(st.integers(1, 3))
    cut = sorted(draw(st.lists(st.integers(0, size), min_size=nseg - 1, max_size=nseg - 1)))
    sizes = tuple(np.diff([0] + cut + [size]).tolist())
    blocks = None
    if draw(st.booleans()):
        blocks = tuple(draw(st.sampled_from([b for b in (1, 2, world) if world % b == 0])) for _ in sizes)
    return Interleaved(d, sizes, blocks)


def layouts(draw, inputs: dict, world: int, shard=None, partial=True) -> dict:
    """Independent layouts, or (half the time) one layout for every input of the first
    input's shape (operands split alike: the programs a user writes most)."""
    out, shared = {}, None
    alike = draw(st.booleans())
    for k, x in inputs.items():
        dims = None if shard is None else shard.get(k, [])
        if alike and shared is not None and tuple(x.shape) == shared[0] and (dims is None or set(shared[2]) <= set(dims)) \
                and (x.dtype == F64 or not isinstance(shared[1], Partial)):
            out[k] = shared[1]
            continue
        out[k] = layout(draw, x, world, dims, partial)
        if shared is None:
            used = [getattr(out[k], "dim", None)]
            shared = (tuple(x.shape), out[k], [u for u in used if u is not None])
    return out
