"""A term's own value on drawn inputs, computed with torch's kernels: what a rule's claim
``local == T_t[ix_(vecs)]`` must match whichever program spelled `t`. :class:`core.Claims`
compares claims with each other, which catches a wrong rule only where two spellings share a
term; :func:`check_terms` compares every claimed term with its value here, so a rewrite that
builds a term of another meaning (a pick one row off, a wrong shift, a dropped mask) fails even
when no other claim meets it. Ops not listed give no value (the claim is checked as before)."""
from __future__ import annotations

import numpy as np
import torch

from shardproof.algebra.softmax_rows import _const_op, _template_args

UNARY = {"exp": torch.exp, "log": torch.log, "neg": torch.neg, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
         "tanh": torch.tanh, "sigmoid": torch.sigmoid, "abs": torch.abs}
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
          "minimum": torch.minimum, "where": torch.where}
REDUCE = {"sum": lambda x, d, k: torch.sum(x, d, keepdim=k), "amax": lambda x, d, k: torch.amax(x, d, keepdim=k),
          "amin": lambda x, d, k: torch.amin(x, d, keepdim=k),
          "logsumexp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k)}


def _t(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x))


def _positions(x: torch.Tensor, dims, over) -> torch.Tensor:
    """`x` restricted to the positions a partial reduction covers (``over``: per dim, None or
    the sorted index bytes)."""
    for d, o in zip(dims, over or (None,) * len(dims)):
        if o is not None:
            x = x.index_select(d, torch.from_numpy(np.frombuffer(o, dtype=np.int64).copy()))
    return x


def _op_value(term, kids: list):
    op, a = term.op, term.attrs
    if op in UNARY and a == ("$", ()):
        return UNARY[op](_t(kids[0]))
    if op in BINARY and a and a[-1] == ():
        args = [_t(x) if isinstance(x, np.ndarray) else x for x in _template_args(a, kids)]
        if op == "where":
            return torch.where(args[0].bool(), *[torch.as_tensor(x, dtype=torch.float64) for x in args[1:]])
        return BINARY[op](*[torch.as_tensor(x, dtype=torch.float64) for x in args])
    if op in BINARY and a == () and len(kids) == 2 and op != "where":  # two tensor operands, broadcast
        return BINARY[op](*[torch.as_tensor(_t(x), dtype=torch.float64) for x in kids])
    if op in REDUCE and len(a) in (2, 3):
        dims, keep = tuple(a[0]), a[1]
        return REDUCE[op](_positions(_t(kids[0]), dims, a[2] if len(a) == 3 else None), dims, keep)
    if op == "take_along" and len(a) == 1:
        x, idx = _t(kids[0]), _t(kids[1]).long()
        return torch.take_along_dim(x, idx.unsqueeze(a[0]), a[0]).squeeze(a[0])
    if op in ("softmax", "log_softmax") and a == (0,):
        return getattr(torch, op)(_t(kids[0]), -1)
    if op == "onehot" and len(a) == 1:
        return torch.nn.functional.one_hot(_t(kids[0]).long(), int(a[0])).double()
    if op == "select" and len(a) == 2:
        return _t(kids[0]).select(a[0], a[1])
    if op == "take" and len(a) == 2:
        return _t(kids[0]).reshape(-1)[torch.from_numpy(np.frombuffer(a[1], dtype=np.int64).copy())].reshape(a[0])
    if op == "range_lookup":  # rows [lo, hi) of W looked up by ids, zero outside
        kind, _, lo, hi = a
        if kind != "embedding":
            return None
        w, ids = _t(kids[0]), _t(kids[1]).long()
        inside = (ids >= lo) & (ids < hi)
        return torch.where(inside.unsqueeze(-1), w[torch.where(inside, ids, 0)], torch.zeros(()).double())
    return _const_op(term, kids)


def term_value(terms, t: int, inputs: dict, memo: dict):
    """Term `t`'s value (float64 numpy) with the input terms given `inputs` by name, or None
    where an op has no value here (input-free terms: their constant value)."""
    if t in memo:
        return memo[t]
    term = terms[t]
    out = None
    if term.op == "input":
        out = inputs.get(term.attrs[0])
    else:
        kids = [term_value(terms, c, inputs, memo) for c in term.children]
        if all(k is not None for k in kids):
            try:
                out = _op_value(term, kids)
            except (ValueError, TypeError, IndexError, RuntimeError):
                out = None
    if out is not None:
        out = np.asarray(out.numpy() if isinstance(out, torch.Tensor) else out, dtype=np.float64)
        if out.shape != tuple(term.shape):
            out = None
    memo[t] = out
    return out


def check_terms(claims, inputs: dict) -> int:
    """Every term `claims` holds values of, against its own value on `inputs` (single-device
    input values by name) where it has one: raises AssertionError at the first term whose
    claimed values differ; returns how many terms were checked."""
    from .core import close
    memo: dict = {}
    checked = 0
    for t, (arr, have) in claims.known.items():
        value = term_value(claims.terms, t, inputs, memo)
        if value is None or not have.any():
            continue
        if not close(np.where(have, arr, 0.0), np.where(have, value, 0.0), claims.atol):
            diff = np.nanmax(np.abs(np.where(have, arr - value, 0.0)))
            raise AssertionError(f"the rules claim term {claims.terms.describe(t)} holds torch's values here, but "
                                 f"the term's own value on these inputs differs by up to {diff:.4g}")
        checked += 1
    return checked
