"""ATen ops along dims (cumsum, flip, roll, topk, padding, index_add), RNG ops (bernoulli,
dropout) and softplus: each exact on any selection of the dims it does not work along.

Numerics are torch's own kernels where torch is present (numpy otherwise, where a one-line
equivalent exists)."""
from __future__ import annotations

import numpy as np

from ..algebra import compute, layout
from ..algebra.layout import Val, same_vec
from ..algebra.ranks import LINEARITY
from ..algebra.terms import freeze
from .common import as_float, elementwise_op
from .registry import RuleCtx, declare

T = "aten."

SAME_RANDOMNESS = ("random ops (bernoulli, training-mode dropout): corresponding elements of the two programs "
                   "draw the same randomness (the mask is a function of the element's position in the "
                   "single-device tensor)")


def _to_torch(a):
    import torch
    if isinstance(a, np.ndarray) or isinstance(a, np.generic):
        a = np.array(a)
        return torch.from_numpy(a.astype(np.float64) if a.dtype.kind == "f" else a)
    if isinstance(a, (list, tuple)) and a and any(isinstance(v, np.ndarray) for v in a):
        return type(a)(_to_torch(v) for v in a)
    return a


def _to_numpy(t):
    import torch
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    if isinstance(t, (tuple, list)):
        return tuple(_to_numpy(v) for v in t)
    return t


def torch_kernel(name: str, fallback=None, drop=("dtype",)):
    """Numerics that run torch's own ``aten.<name>`` (floats at float64); `fallback` (numpy)
    where torch is not installed. Keyword arguments in `drop` (an output dtype) are left out:
    the numerics keep floats at float64."""
    def numerics(*args, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k not in drop}
        try:
            import torch
        except ImportError:
            if fallback is None:
                raise NotImplementedError(f"aten.{name}: numerics need torch") from None
            return fallback(*args, **kwargs)
        try:
            with torch.no_grad():
                out = getattr(torch.ops.aten, name)(*[_to_torch(a) for a in args],
                                                     **{k: _to_torch(v) for k, v in kwargs.items()})
        except RuntimeError as exc:  # torch refuses these arguments (shapes that do not fit): a ValueError
            raise ValueError(f"aten.{name}: {exc}") from exc
        return _to_numpy(out)
    numerics.source = f"torch aten.{name}"
    return numerics


def along(ctx: RuleCtx, op: str, attrs: tuple, x: Val, dims, n_out: int = 1, others=(), whole=()):
    """An op that works along `dims` of `x` (held whole), elementwise in the others: the
    term of the whole tensor, with `x`'s selection of the other dims. `others` share `x`'s
    shape and selection outside `dims` (else everything is materialized); `whole` operands
    (an index) are held whole."""
    terms = ctx.terms
    nd = len(x.vecs)
    dims = sorted({d % nd for d in dims})
    x = layout.materialize(terms, x, dims)
    others = [layout.materialize(terms, o, dims) for o in others]
    ts = terms.shape(x.t)
    if any(terms.shape(o.t) != ts and [terms.shape(o.t)[d] for d in range(nd) if d not in dims]
           != [ts[d] for d in range(nd) if d not in dims] or
           not all(same_vec(o.vecs[d], x.vecs[d]) for d in range(nd) if d not in dims) for o in others):
        x, others = layout.materialize(terms, x), [layout.materialize(terms, o) for o in others]
        ts = terms.shape(x.t)
    whole = [layout.materialize(terms, w) for w in whole]
    children = (x.t,) + tuple(o.t for o in others) + tuple(w.t for w in whole)
    vecs = tuple(None if d in dims else x.vecs[d] for d in range(nd))
    outs = []
    for i, local in enumerate(ctx.out_shapes()[:n_out]):
        shape = tuple(local[d] if d in dims else ts[d] for d in range(nd))
        outs.append(Val(terms.make(op, (tuple(dims),) + attrs + (i,), children, shape), vecs))
    return tuple(outs) if n_out > 1 else outs[0]


def _dims_list(dims):
    return [dims] if isinstance(dims, int) else list(dims)


# ------------------------------------------------------------------ scans, flips, rolls

declare(T + "cumsum", numerics=torch_kernel("cumsum", lambda x, dim, **k: np.cumsum(x, axis=dim)),
        rule=lambda ctx, x, dim, dtype=None: along(ctx, "cumsum", (), x, [dim]),
        doc="running sum along a dim (over a sharded dim: unknown, the offset of earlier shards is not added)")
declare(T + "flip", numerics=torch_kernel("flip", lambda x, dims: np.flip(x, axis=tuple(dims))),
        rule=lambda ctx, x, dims: along(ctx, "flip", (), x, _dims_list(dims)), doc="reverse along dims")


# running sums, flips and rolls are linear: rank-partial sums pass through them
LINEARITY.update({"cumsum": "all", "flip": "all", "roll": "all", "roll_flat": "all"})


def _roll_rule(ctx: RuleCtx, x: Val, shifts, dims=()):
    shifts, dims = _dims_list(shifts), _dims_list(dims)
    if not dims:  # rolls the flattened tensor: every dim is worked along
        return along(ctx, "roll_flat", (tuple(shifts),), x, range(len(x.vecs)))
    nd = len(x.vecs)
    by_dim = {}
    for s, d in zip(shifts, dims):
        by_dim[d % nd] = by_dim.get(d % nd, 0) + s
    return along(ctx, "roll", (tuple(sorted(by_dim.items())),), x, list(by_dim))


declare(T + "roll", numerics=torch_kernel("roll"), rule=_roll_rule, doc="rotate along dims (or the flattened tensor)")


def _topk_rule(ctx: RuleCtx, x: Val, k, dim=-1, largest=True, sorted=True):
    return along(ctx, "topk", (int(k), bool(largest), bool(sorted)), x, [dim], n_out=2)


declare(T + "topk", numerics=torch_kernel("topk"), rule=_topk_rule,
        doc="the k largest (smallest) along a dim, values and indices (ties: torch's order)")


def _pad_rule(ctx: RuleCtx, x: Val, pad, value=0):
    nd = len(x.vecs)
    sides = {nd - 1 - i: (int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(len(pad) // 2)}
    sides = {d: s for d, s in sides.items() if s != (0, 0)}
    if not sides:
        return x
    return along(ctx, "constant_pad", (tuple(sorted(sides.items())), freeze(value)), x, list(sides))


declare(T + "constant_pad_nd", numerics=torch_kernel("constant_pad_nd"), rule=_pad_rule,
        doc="pad (or crop) the trailing dims with a constant (F.pad's constant mode)")


def _index_add_rule(ctx: RuleCtx, x: Val, dim, index: Val, source: Val, alpha=1):
    return along(ctx, "index_add", (freeze(alpha),), x, [dim], others=[source], whole=[index])


declare(T + "index_add", numerics=torch_kernel("index_add"), rule=_index_add_rule,
        doc="x with source's slices added at index along a dim")


# ------------------------------------------------------------------ elementwise


def _softplus_np(x, beta=1, threshold=20):
    x = as_float(x)
    with np.errstate(over="ignore"):
        return np.where(x * beta > threshold, x, np.log1p(np.exp(beta * x)) / beta)


elementwise_op(T + "softplus", torch_kernel("softplus", _softplus_np), doc="log(1 + exp(beta x)) / beta")
elementwise_op(T + "clamp_min", torch_kernel("clamp_min", lambda x, lo: np.maximum(x, lo)), doc="max(x, lo)")
elementwise_op(T + "clamp_max", torch_kernel("clamp_max", lambda x, hi: np.minimum(x, hi)), doc="min(x, hi)")


# ------------------------------------------------------------------ random ops: same randomness convention


def _uniform(shape):
    """The reference numerics' position-keyed uniform draws, so both programs agree."""
    return ((np.arange(int(np.prod(shape))).reshape(shape) * 2654435761) % 1000) / 1000.0


def _bernoulli_num(x, p=None, generator=None):
    x = as_float(x)
    return (_uniform(x.shape) < (x if p is None else p)).astype(np.float64)


def _bernoulli_rule(ctx: RuleCtx, x: Val, p=None, generator=None):
    """Draws with probability x: elementwise in x. With a probability p, x's values are not
    read (dropout draws into ``empty_like``): the draws are keyed by position in x's term
    and by the node's name (the k-th draw of each program corresponds), nothing else."""
    if p is None:
        return compute.elementwise(ctx.terms, "bernoulli", (), [x])
    name = getattr(ctx.node, "name", None)
    return Val(ctx.terms.make("bernoulli_p", (freeze(p), name), (), ctx.terms.shape(x.t)), x.vecs)


declare(T + "bernoulli", numerics=_bernoulli_num, rule=_bernoulli_rule, assumes=SAME_RANDOMNESS,
        doc="draws of 1 with probability x (or p), same-randomness convention")


def _dropout_rule(ctx: RuleCtx, x: Val, p, train=True):
    """Same-mask convention: the mask is a function of the element's position in the
    single-device tensor, so dropout commutes with any selection."""
    if not train or p == 0:
        return (x, compute.elementwise(ctx.terms, "ones_mask", (), [x]))
    out = compute.elementwise(ctx.terms, "dropout", (freeze(p),), [x])
    mask = compute.elementwise(ctx.terms, "dropout_mask", (freeze(p),), [x])
    return (out, mask)


def _dropout_num(x, p, train=True):
    """Reference numerics use a deterministic position-keyed mask so both programs agree."""
    x = as_float(x)
    if not train or p == 0:
        return x, np.ones(x.shape, bool)
    keep = _uniform(x.shape) >= p
    return np.where(keep, x / (1 - p), 0.0), keep


declare(T + "native_dropout", numerics=_dropout_num, rule=_dropout_rule, assumes=SAME_RANDOMNESS,
        doc="dropout, same-mask convention")
declare(T + "dropout", numerics=lambda x, p, train=True: _dropout_num(x, p, train)[0],
        rule=lambda ctx, x, p, train=True: _dropout_rule(ctx, x, p, train)[0], assumes=SAME_RANDOMNESS,
        doc="dropout, same-mask convention")


def _random_rule(op: str):
    """Random creation (rand, randn, randperm): under the same-randomness convention the draws
    are keyed by position in a tensor of the requested size and by the node's name (the k-th
    draw of each program corresponds); a draw of another size is another term."""
    def rule(ctx: RuleCtx, *args, **kwargs):
        shape = ctx.out_shapes()[0]
        attrs = (getattr(ctx.node, "name", None), freeze(kwargs.get("dtype")))
        return Val(ctx.terms.make(op, attrs, (), shape), (None,) * len(shape))
    return rule


def _random_num(kind: str):
    """Reference draws keyed by position (both programs agree); not torch's stream."""
    def numerics(size, *a, **k):
        if kind == "randperm":
            return np.argsort(_uniform((int(size),)) + np.arange(int(size)) * 1e-9, kind="stable")
        u = _uniform(tuple(size))
        return u if kind == "rand" else (u - 0.5) * np.sqrt(12.0)
    return numerics


for _name in ("rand", "randn", "randperm"):
    declare(T + _name, numerics=_random_num(_name), rule=_random_rule(_name), assumes=SAME_RANDOMNESS,
            doc=f"{_name}, same-randomness convention (draws keyed by position and by the k-th draw)")
