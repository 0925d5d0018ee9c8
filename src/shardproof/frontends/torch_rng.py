"""Random ops run with corresponding randomness (the executor's half of
:mod:`shardproof.engine.rng`).

The single-device program's random node draws its values from a generator seeded by
:func:`~shardproof.engine.rng.stream_key`, in blocks of :data:`BLOCK` elements of its flat
index (uniform in [0, 1) for dropout, bernoulli and
rand; standard normal for randn); a rank's random node receives the same draw at the
positions its :class:`~shardproof.engine.rng.Draw` names (the draw is regenerated from its
key, so nothing is kept between the programs). The op's semantics are then PyTorch's:

* ``native_dropout(x, p, train)``: keep where the uniform draw ``>= p``, ``x * keep / (1 - p)``
  (and the mask); ``dropout`` the same without the mask;
* ``bernoulli(x)``: ``draw < x``; ``bernoulli(x, p)``: ``draw < p``;
* ``rand``/``rand_like``: the draw; ``randn``/``randn_like``: the normal draw.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..engine.rng import NORMAL, Draw, RandomPlan, stream_key
from ..ir.graph import Node


BLOCK = 1 << 20
"""A draw is generated in blocks of this many elements of its flat index, each from its own
seed, so that any range of it is the same values as the whole draw (chunked execution)."""


class Randomness:
    """The draws of one value set (`seed`) for the programs of `plan`."""

    def __init__(self, plan: RandomPlan, seed: int, device):
        self.plan, self.seed, self.device = plan, seed, device
        self._cached = (None, None)

    def _block(self, seq_node: str, b: int, total: int, normal: bool) -> torch.Tensor:
        if self._cached[0] == (seq_node, b):
            return self._cached[1]
        g = torch.Generator(device=self.device)
        g.manual_seed(stream_key(self.seed, f"{seq_node}#{b}"))
        make = torch.randn if normal else torch.rand
        out = make((min(BLOCK, total - b * BLOCK),), generator=g, dtype=torch.float32, device=self.device)
        self._cached = ((seq_node, b), out)
        return out

    def _span(self, seq_node: str, total: int, normal: bool, start: int, count: int) -> torch.Tensor:
        """Elements [start, start + count) of the flat draw of `seq_node` (`total` elements)."""
        parts = []
        for b in range(start // BLOCK, (start + count - 1) // BLOCK + 1):
            blk = self._block(seq_node, b, total, normal)
            lo, hi = max(start - b * BLOCK, 0), min(start + count - b * BLOCK, blk.shape[0])
            parts.append(blk[lo:hi])
        return parts[0].clone() if len(parts) == 1 else torch.cat(parts)

    def draw(self, rank, node: Node) -> torch.Tensor:
        """The values `node` draws: its own (single-device, rank None) or its piece of the
        corresponding single-device draw (a rank)."""
        shape = self._shape(rank, node)
        return self.draw_range(rank, node, 0, math.prod(shape)).reshape(shape)

    def _shape(self, rank, node: Node) -> tuple:
        if rank is None:
            return tuple(self.plan.seq[node.name])
        d: Draw = self.plan.ranks[rank][node.name]
        return tuple(s if p is None else len(p) for s, p in zip(d.shape, d.positions))

    def draw_range(self, rank, node: Node, start: int, count: int) -> torch.Tensor:
        """Elements [start, start + count) of :meth:`draw`'s values, flat, without the rest."""
        if rank is None:
            shape = tuple(self.plan.seq[node.name])
            return self._span(node.name, math.prod(shape), node.op in NORMAL, start, count)
        d: Draw = self.plan.ranks[rank][node.name]
        shape, total = self._shape(rank, node), math.prod(d.shape)
        k = len(shape)
        while k and d.positions[k - 1] is None:
            k -= 1
        row = math.prod(shape[k:])  # the rank's elements in runs of `row`, contiguous in the draw
        first, last = start // row, (start + count - 1) // row
        rows = np.arange(first, last + 1)
        seq_start = np.zeros(len(rows), dtype=np.int64)
        for dim, i in enumerate(np.unravel_index(rows, shape[:k]) if k else ()):
            pos = d.positions[dim]
            at = np.asarray(i) if pos is None else np.asarray(pos, dtype=np.int64)[i]
            seq_start += at * math.prod(d.shape[dim + 1:])
        runs: list = []  # (start in the draw, length), merged where contiguous
        for j, s in enumerate(seq_start.tolist()):
            lo = start - first * row if j == 0 else 0
            hi = start + count - last * row if j == len(rows) - 1 else row
            if runs and runs[-1][0] + runs[-1][1] == s + lo:
                runs[-1][1] += hi - lo
            else:
                runs.append([s + lo, hi - lo])
        parts = [self._span(d.seq_node, total, d.normal, s, n) for s, n in runs]
        return parts[0] if len(parts) == 1 else torch.cat(parts)


def run_random(op: str, raw: torch.Tensor, args, kwargs):
    """The random op `op` on its arguments, given the values it draws (`raw`)."""
    if op in ("aten.native_dropout", "aten.dropout"):
        x = args[0]
        p = float(kwargs.get("p", args[1] if len(args) > 1 else 0.5))
        keep = raw >= p
        del raw
        out = x.mul(keep).div_(1 - p) if p < 1 else torch.zeros_like(x)
        return (out, keep) if op == "aten.native_dropout" else out
    if op == "aten.bernoulli":
        p = kwargs.get("p", args[1] if len(args) > 1 and not isinstance(args[1], torch.Generator) else None)
        prob = args[0] if p is None else p
        return (raw < prob).to(args[0].dtype)
    return raw  # rand, randn and their _like forms
