"""Property harness core: drive an op's numerics and relation rule against torch's own kernel.

An op's harness entry draws a :class:`Draw`: the single-device input tensors and the op's
arguments, with :class:`T` placeholders where tensors go (arguments may depend on the input
shapes, so each rank passes arguments that fit its local tensors, as a real program would).

* :func:`check_numerics` runs ``torch.ops.aten.<op>`` and the declared numpy numerics on
  the same values and compares within a dtype-aware tolerance.
* :func:`check_rule` gives each input a layout (Shard, uneven Slices, Interleaved,
  Partial, Replicate) over 2-4 ranks, runs the torch kernel on every rank's local values,
  drives the op's relation rule on the matching symbolic values (``term[layout]``), and
  checks every claim the rule makes on the torch values: a value ``Val(t, vecs)`` claims
  ``local == T_t[ix_(vecs)]`` where ``T_t`` is the one value of term ``t`` (the term store
  is hash-consed: one id, one value). Claims are collected per term; two claims that
  disagree on an element are a soundness bug. Outputs the rule leaves as per-rank terms
  are completed by the all_reduce rule (a Partial claim) and checked the same way.
  A rule that raises is "unknown" (the engine reports such nodes as unsupported).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch

from shardproof.algebra.layout import Val, full, shape_of, vec_array
from shardproof.algebra.padding import padded_val
from shardproof.algebra.terms import TermStore
from shardproof.frontends.torch_capture import DTYPES
from shardproof.ir.graph import Node, TensorType
from shardproof.ops.registry import REGISTRY, RuleCtx, failed_check, load_builtin, run_numerics
from shardproof.ops.registry import apply_rule as with_post_rules
from shardproof.relations.spec import Partial, RelationError

load_builtin()


def examples(default: int) -> int:
    """Hypothesis examples per op: `default`, or SHARDPROOF_HARNESS_EXAMPLES for deeper runs
    (``make harness``)."""
    import os
    return int(os.environ.get("SHARDPROOF_HARNESS_EXAMPLES", default))


@dataclass(frozen=True)
class T:
    """Placeholder for input tensor `name` in an op's arguments."""
    name: str


@dataclass
class Draw:
    """One drawn application of `op`: single-device inputs, and the arguments as a function of
    the input shapes (``args(shapes) -> (args, kwargs)``), or fixed."""
    op: str
    inputs: dict
    args: Any
    kwargs: dict = field(default_factory=dict)
    shard: Optional[dict] = None   # name -> dims that may be split (default: all dims of every input)
    partial: tuple = ()            # names that may be Partial("sum") (the op is linear in them)
    torch_fn: Optional[Callable] = None  # kernel override (a CUDA-only kernel: its CPU twin)
    values: bool = True            # False: compare shapes only (uninitialized memory)
    empty_ok: bool = True          # False: the CPU kernel dies (SIGFPE) on a zero-size tensor: skip such ranks

    def build(self, shapes: dict):
        if callable(self.args):
            return self.args(shapes)
        return self.args, self.kwargs


def aten(op: str):
    """The torch kernel of a registry name (``aten.add`` -> ``torch.ops.aten.add``)."""
    ns, name = op.split(".", 1)
    return getattr(getattr(torch.ops, ns), name)


def _map(x, fn):
    if isinstance(x, T):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _ir(x):
    """A constant argument as the capture frontend passes it (dtypes as short names)."""
    if isinstance(x, torch.dtype):
        return DTYPES.get(x, str(x))
    if isinstance(x, (list, tuple)):
        return type(x)(_ir(v) for v in x)
    return x


def run_torch(d: Draw, tensors: dict, args, kwargs):
    targs = _map(args, lambda p: tensors[p.name])
    tkwargs = _map(kwargs, lambda p: tensors[p.name])
    fn = d.torch_fn or aten(d.op)
    return fn(*targs, **tkwargs)


def same_shapes(kernel):
    """A kernel that does not check its operands' shapes (it reads them as if equal): refuse
    a rank's program whose operands differ, as torch's checked twins would."""
    def run(*args, **kwargs):
        shapes = {tuple(a.shape) for a in args if isinstance(a, torch.Tensor)}
        if len(shapes) > 1:
            raise ValueError(f"operand shapes differ: {sorted(shapes)}")
        return kernel(*args, **kwargs)
    return run


def to_np(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.is_floating_point():
        return t.double().numpy()
    return t.numpy().copy()


def flat_outputs(out) -> list:
    if isinstance(out, (list, tuple)):
        return [o for x in out for o in flat_outputs(x)]
    return [out]


# ---------------------------------------------------------------- tolerance

_EPS = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}


def tolerance(dtypes, scale: float, n: int = 1) -> float:
    """Absolute tolerance: the worst input dtype's epsilon, times the magnitude of the values
    involved and a growth factor for accumulations over `n` terms."""
    eps = max((_EPS.get(dt, 0.0) for dt in dtypes), default=0.0)
    return eps * (1.0 + scale) * (8.0 + 4.0 * np.sqrt(max(n, 1)))


def close(a, b, atol: float) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    return bool(np.allclose(a, b, rtol=max(atol, 1e-12) if atol else 0.0, atol=atol, equal_nan=True))


def magnitude(arrays) -> float:
    m = 0.0
    for a in arrays:
        a = np.asarray(a, dtype=np.float64)
        fin = np.abs(a[np.isfinite(a)]) if a.size else a
        if fin.size:
            m = max(m, float(fin.max()))
    return m


# ---------------------------------------------------------------- numerics vs torch

def check_numerics(d: Draw) -> None:
    opdef = REGISTRY[d.op]
    shapes = {k: tuple(v.shape) for k, v in d.inputs.items()}
    args, kwargs = d.build(shapes)
    expected = run_torch(d, d.inputs, args, kwargs)
    nargs = _map(args, lambda p: to_np(d.inputs[p.name]))
    nkwargs = _map(kwargs, lambda p: to_np(d.inputs[p.name]))
    # what the engine's numerics take from the node (the output dtype, the input's storage layout)
    node = _node(d, d.inputs, args, kwargs, expected, "numerics")
    with np.errstate(all="ignore"):
        got = run_numerics(opdef, node, _ir(nargs), {k: _ir(v) for k, v in nkwargs.items()})
    exp = [to_np(o) for o in flat_outputs(expected) if isinstance(o, torch.Tensor)]
    if not exp:  # the kernel returns nothing (an assertion op)
        return
    got = [np.asarray(g) for g in flat_outputs(got) if g is not None][:len(exp)] if isinstance(got, (list, tuple)) \
        else [np.asarray(got)]  # outputs the op does not compute (None) are left out, as from exp
    assert len(got) == len(exp), f"{d.op}: numerics gave {len(got)} outputs, torch {len(exp)}"
    dtypes = [t.dtype for t in d.inputs.values()] + [o.dtype for o in flat_outputs(expected)
                                                     if isinstance(o, torch.Tensor)]
    n = max([t.numel() for t in d.inputs.values()] + [1])
    atol = tolerance(dtypes, magnitude(exp + [to_np(t) for t in d.inputs.values()]), n)
    out_dtypes = [o.dtype for o in flat_outputs(expected) if isinstance(o, torch.Tensor)]
    # dtype-aware: the float64 reference rounded to the kernel's output dtype (overflow included)
    got = [to_np(torch.from_numpy(np.asarray(g, dtype=np.float64)).to(dt)) if dt.is_floating_point and
           np.asarray(g).dtype != object else g for g, dt in zip(got, out_dtypes)]
    for i, (g, e) in enumerate(zip(got, exp)):
        assert g.shape == e.shape, f"{d.op} output {i}: numerics shape {g.shape}, torch {e.shape}"
        if not d.values:
            continue
        assert close(g, e, atol), (f"{d.op} output {i}: numerics disagree with torch (atol {atol:.3g}); "
                                   f"max diff {np.nanmax(np.abs(g.astype(float) - e.astype(float)))}")


# ---------------------------------------------------------------- rule vs torch

class Claims:
    """The values the rules claim each term holds, element by element."""

    def __init__(self, terms: TermStore, atol: float):
        self.terms, self.atol = terms, atol
        self.known: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, val: Val, value: np.ndarray, who: str) -> None:
        shape = self.terms.shape(val.t)
        assert tuple(shape_of(self.terms, val)) == tuple(value.shape), (
            f"{who}: the rule's layout has shape {shape_of(self.terms, val)}, torch's value {value.shape}")
        if value.ndim == 0 or not len(shape):
            idx = ()
        else:
            idx = np.ix_(*[vec_array(v, s) for v, s in zip(val.vecs, shape)])
        arr, have = self.known.setdefault(val.t, (np.zeros(shape), np.zeros(shape, bool)))
        old, seen = arr[idx], have[idx]
        if np.any(seen):
            ok = close(np.where(seen, old, 0.0), np.where(seen, value, 0.0), self.atol)
            if not ok:
                diff = np.abs(np.where(seen, old - value, 0.0))
                raise AssertionError(f"{who}: the rule claims term {self.terms.describe(val.t)} here, but torch's "
                                     f"values differ from another claim of it by up to {np.nanmax(diff):.4g}")
        arr[idx] = np.where(seen, old, value)
        have[idx] = True


def _node_type(out):
    """As live capture records it: shape, dtype, strides and storage offset."""
    if isinstance(out, torch.Tensor):
        return TensorType(tuple(out.shape), DTYPES.get(out.dtype, str(out.dtype)), tuple(out.stride()),
                          out.storage_offset())
    if isinstance(out, (list, tuple)):
        return tuple(_node_type(o) for o in out)
    return None


def _split_sum(x: torch.Tensor, world: int, gen: np.random.Generator) -> list[torch.Tensor]:
    parts = [torch.from_numpy(gen.integers(-4, 5, size=tuple(x.shape)).astype(np.float64)).to(x.dtype)
             for _ in range(world - 1)]
    return parts + [x - sum(parts)]


def local_inputs(d: Draw, layouts: dict, world: int, terms: TermStore, seed: int):
    """Per rank: (torch tensors, symbolic values, Partial term ids) for `layouts`."""
    gen = np.random.default_rng(seed)
    seq_vals = {k: full(terms, terms.make("input", (k, DTYPES.get(v.dtype, "")), (), tuple(v.shape)))
                for k, v in d.inputs.items()}
    ranks = []
    pieces = {k: _split_sum(v, world, gen) for k, v in d.inputs.items() if isinstance(layouts.get(k), Partial)}
    for r in range(world):
        tens, vals = {}, {}
        for k, x in d.inputs.items():
            rel = layouts.get(k)
            if isinstance(rel, Partial):
                tens[k] = pieces[k][r]
                vals[k] = full(terms, terms.make("partial_input", ("sum", r, world), (seq_vals[k].t,), tuple(x.shape)))
                continue
            vecs = (None,) * x.dim() if rel is None else rel.layout(tuple(x.shape), r, world)
            idx = [torch.arange(s) if v is None else torch.from_numpy(np.asarray(v)) for v, s in zip(vecs, x.shape)]
            local = x
            for dim, ix in enumerate(idx):
                if len(ix) and int(ix.max()) >= local.shape[dim]:  # zero padding past the end
                    zeros = list(local.shape)
                    zeros[dim] = max(int(ix.max()) + 1 - local.shape[dim], rel.padding())
                    local = torch.cat([local, torch.zeros(zeros, dtype=local.dtype)], dim)
                local = local.index_select(dim, ix)
            tens[k] = local
            vals[k] = padded_val(terms, seq_vals[k].t, tuple(vecs), getattr(rel, "padding", lambda: 0)())
        ranks.append((tens, vals))
    return seq_vals, ranks


class Unknown(Exception):
    """The rule made no claim here (it raised, or the local program is not valid torch)."""


def _node(d: Draw, tensors: dict, args, kwargs, out, name) -> Node:
    inputs = {k: Node(k, "input", type=_node_type(v)) for k, v in tensors.items()}
    return Node(f"{d.op}_{name}", d.op, _ir(_map(args, lambda p: inputs[p.name])),
                {k: _ir(v) for k, v in _map(kwargs, lambda p: inputs[p.name]).items()}, _node_type(out))


def apply_rule(d: Draw, terms: TermStore, vals: dict, tensors: dict, args, kwargs, out, rank: int, world: int):
    node = _node(d, tensors, args, kwargs, out, f"r{rank}")
    ctx = RuleCtx(terms, node, rank, world)
    reason = failed_check(REGISTRY[d.op], node)
    if reason is not None:  # the engine reports the node unsupported: no claim
        raise Unknown(f"check failed: {reason}")
    try:
        return with_post_rules(REGISTRY[d.op], ctx, _ir(_map(args, lambda p: vals[p.name])),
                               {k: _ir(v) for k, v in _map(kwargs, lambda p: vals[p.name]).items()})
    except (AssertionError, KeyboardInterrupt):
        raise
    except Exception as exc:  # the engine reports the node unsupported: no claim
        raise Unknown(f"rule raised {type(exc).__name__}: {exc}") from exc


def _pairs(vals, outs) -> list:
    """(Val, torch tensor) pairs of an op's outputs (tuples and lists flattened)."""
    if isinstance(vals, Val):
        return [(vals, outs)] if isinstance(outs, torch.Tensor) else []
    if isinstance(vals, (list, tuple)) and isinstance(outs, (list, tuple)):
        assert len(vals) == len(outs), f"the rule gives {len(vals)} outputs, torch {len(outs)}"
        return [p for v, o in zip(vals, outs) for p in _pairs(v, o)]
    if vals is None or outs is None:
        return []
    raise AssertionError(f"the rule's outputs {type(vals).__name__} do not match torch's {type(outs).__name__}")


def check_rule(d: Draw, layouts: dict, world: int, seed: int = 0) -> str:
    """Check every claim of the rule on torch's values; returns "checked" or "unknown"."""
    terms = TermStore()
    try:
        seq_vals, ranks = local_inputs(d, layouts, world, terms, seed)
    except RelationError as exc:
        raise Unknown(str(exc)) from exc
    shapes = {k: tuple(v.shape) for k, v in d.inputs.items()}
    args, kwargs = d.build(shapes)
    s_out = run_torch(d, d.inputs, args, kwargs)
    dtypes = [t.dtype for t in d.inputs.values()]
    n = max([t.numel() for t in d.inputs.values()] + [1])
    values = [to_np(t) for t in d.inputs.values()] + [to_np(o) for o in flat_outputs(s_out) if isinstance(o, torch.Tensor)]
    claims = Claims(terms, tolerance(dtypes, magnitude(values), n) * (world + 1))
    s_vals = apply_rule(d, terms, seq_vals, d.inputs, args, kwargs, s_out, 0, 1)
    for k, v in d.inputs.items():
        claims.add(seq_vals[k], to_np(v), f"input {k}")
    s_pairs = _pairs(s_vals, s_out)
    for i, (v, o) in enumerate(s_pairs):
        claims.add(v, to_np(o) if d.values else np.zeros(tuple(o.shape)), f"single-device output {i}")
    rank_pairs = []
    for r, (tens, vals) in enumerate(ranks):
        for k, v in vals.items():
            claims.add(v, to_np(tens[k]), f"rank {r} input {k}")
        if not d.empty_ok and any(t.numel() == 0 for t in tens.values()):
            raise Unknown(f"rank {r} holds an empty tensor, on which this CPU kernel dies (SIGFPE)")
        try:
            largs, lkwargs = d.build({k: tuple(v.shape) for k, v in tens.items()})
            out = run_torch(d, tens, largs, lkwargs)
        except Unknown:
            raise
        except Exception as exc:  # the local program is not valid torch: nothing to check
            raise Unknown(f"torch rejects rank {r}'s program: {exc}") from exc
        r_vals = apply_rule(d, terms, vals, tens, largs, lkwargs, out, r, world)
        pairs = _pairs(r_vals, out)
        rank_pairs.append(pairs)
        for i, (v, o) in enumerate(pairs):
            if not d.values:  # garbage values: only the claimed shape is checked
                assert tuple(shape_of(terms, v)) == tuple(o.shape), f"rank {r} output {i}: shape"
                continue
            claims.add(v, to_np(o), f"rank {r} output {i} (layouts {layouts})")
    if not d.values:
        return "unknown"
    related = _complete(terms, claims, s_pairs, rank_pairs)
    from .term_values import check_terms  # every claimed term against its own value on these inputs
    check_terms(claims, {k: to_np(v) for k, v in d.inputs.items()})
    return "checked" if related else "unknown"


def _complete(terms: TermStore, claims: Claims, s_pairs, rank_pairs) -> bool:
    """Outputs held as per-rank terms: what does the all_reduce rule say their sum is?
    Returns whether any output claimed a relation to the single-device output."""
    from shardproof.ops.collectives import C
    related = False
    for i, (sv, so) in enumerate(s_pairs):
        outs = [p[i] for p in rank_pairs if i < len(p)]
        if len(outs) != len(rank_pairs):
            continue
        if any(v.t == sv.t for v, _ in outs):
            related = True
            continue
        if len({tuple(o.shape) for _, o in outs}) != 1 or not outs[0][1].is_floating_point():
            continue
        ctx = RuleCtx(terms, None, 0, len(outs))
        group = tuple(range(len(outs)))
        try:
            summed = REGISTRY[C + "all_reduce"].rule(ctx, [v for v, _ in outs], "sum", group)[0]
        except Exception:
            continue
        total = sum(to_np(o) for _, o in outs)
        claims.add(summed, total, f"all_reduce(sum) of output {i}")
        related |= summed.t == sv.t
    return related
