"""Complex tensors as pairs of reals (torchtitan's complex RoPE: ``view_as_complex`` of adjacent
pairs, a product with a complex table, ``view_as_real``).

At capture, a complex input enters as its ``view_as_real`` (a real tensor with a trailing dim
of 2, related by value like any other input) and complex products are decomposed into real
arithmetic on the pairs (:mod:`shardproof.frontends.torch_decomp`), so the only complex ops
left are the two reinterpreting views and the shape ops between them (slices, views), which
keep their rules. ``view_as_complex`` needs the pair dim whole on the rank (it is its last,
contiguous dim of 2); both views commute with any selection of the other dims."""
from __future__ import annotations

import numpy as np

from ..algebra import layout
from ..algebra.layout import Val
from .registry import RuleCtx, declare


def _as_complex_num(x):
    x = np.asarray(x)
    return x[..., 0] + 1j * x[..., 1]


def _as_real_num(z):
    z = np.asarray(z)
    return np.stack([z.real, z.imag], axis=-1)


def _as_complex_rule(ctx: RuleCtx, x: Val) -> Val:
    last = len(x.vecs) - 1
    x = layout.materialize(ctx.terms, x, [last])  # the pair dim whole (it always is: 2 elements, last)
    shape = ctx.terms.shape(x.t)[:-1]
    return Val(ctx.terms.make("view_as_complex", (), (x.t,), shape), x.vecs[:-1])


def _as_real_rule(ctx: RuleCtx, z: Val) -> Val:
    shape = tuple(ctx.terms.shape(z.t)) + (2,)
    return Val(ctx.terms.make("view_as_real", (), (z.t,), shape), z.vecs + (None,))


declare("aten.view_as_complex", numerics=_as_complex_num, rule=_as_complex_rule,
        doc="complex view of a real tensor's last dim of 2 (the pair dim whole on the rank)")
declare("aten.view_as_real", numerics=_as_real_num, rule=_as_real_rule,
        doc="real view of a complex tensor: a trailing dim of (real, imag)")


def complex_mul(a, b):
    """A decomposition of ``aten.mul.Tensor`` for complex operands: (ar + i ai)(br + i bi) in real
    arithmetic on the pairs; ``NotImplemented`` (torch's own op) for real ones."""
    import torch
    if not any(isinstance(v, torch.Tensor) and v.is_complex() for v in (a, b)):
        return NotImplemented
    ar, ai = _parts(a)
    br, bi = _parts(b)
    return torch.view_as_complex(torch.stack([ar * br - ai * bi, ar * bi + ai * br], dim=-1))


def complex_conj(z):
    """A decomposition of ``aten._conj`` (the conjugate the backward of a complex product takes):
    (zr, -zi) on the pairs; ``NotImplemented`` for a real operand."""
    import torch
    if not (isinstance(z, torch.Tensor) and z.is_complex()):
        return NotImplemented
    zr, zi = _parts(z)
    return torch.view_as_complex(torch.stack([zr, -zi], dim=-1))


def _parts(v):
    import torch
    if isinstance(v, torch.Tensor) and v.is_complex():
        pair = torch.view_as_real(v)
        return pair.select(-1, 0), pair.select(-1, 1)
    return v, 0 * v if isinstance(v, torch.Tensor) else 0
