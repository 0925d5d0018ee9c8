"""Random ops run with corresponding randomness (the executor's half of
:mod:`shardproof.engine.rng`).

The single-device program's random node draws its values from a generator seeded by
:func:`~shardproof.engine.rng.stream_key` (uniform in [0, 1) for dropout, bernoulli and
rand; standard normal for randn); a rank's random node receives the same draw at the
positions its :class:`~shardproof.engine.rng.Draw` names (the draw is regenerated from its
key, so nothing is kept between the programs). The op's semantics are then PyTorch's:

* ``native_dropout(x, p, train)``: keep where the uniform draw ``>= p``, ``x * keep / (1 - p)``
  (and the mask); ``dropout`` the same without the mask;
* ``bernoulli(x)``: ``draw < x``; ``bernoulli(x, p)``: ``draw < p``;
* ``rand``/``rand_like``: the draw; ``randn``/``randn_like``: the normal draw.
"""
from __future__ import annotations

import torch

from ..engine.rng import NORMAL, Draw, RandomPlan, stream_key
from ..ir.graph import Node


class Randomness:
    """The draws of one value set (`seed`) for the programs of `plan`."""

    def __init__(self, plan: RandomPlan, seed: int, device):
        self.plan, self.seed, self.device = plan, seed, device

    def _raw(self, seq_node: str, shape: tuple, normal: bool) -> torch.Tensor:
        g = torch.Generator(device=self.device)
        g.manual_seed(stream_key(self.seed, seq_node))
        make = torch.randn if normal else torch.rand
        return make(tuple(shape), generator=g, dtype=torch.float32, device=self.device)

    def draw(self, rank, node: Node) -> torch.Tensor:
        """The values `node` draws: its own (single-device, rank None) or its piece of the
        corresponding single-device draw (a rank)."""
        if rank is None:
            return self._raw(node.name, self.plan.seq[node.name], node.op in NORMAL)
        d: Draw = self.plan.ranks[rank][node.name]
        raw = self._raw(d.seq_node, d.shape, d.normal)
        for dim, pos in enumerate(d.positions):
            if pos is not None:
                raw = raw.index_select(dim, torch.as_tensor(pos, dtype=torch.long, device=self.device))
        return raw


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
