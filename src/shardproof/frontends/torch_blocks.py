"""One block of a layer stack as a program of its own, forward and backward (issue 16's
block contracts): ``BlockVJP(block)(x, g)`` returns the block's output ``y``, and the
vector-Jacobian product with the output gradient ``g``: ``grad_x`` and ``grad:<param>`` for
every parameter. Traced per rank like any live case, it is what a block contract is proved
on: the input relations of ``x`` and ``g`` in, the proved relations of ``y``, ``grad_x`` and
the parameter gradients out."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..case import Case

GRAD = "grad:"


class BlockVJP(nn.Module):
    """Forward and backward of `block` at the input `x` and output gradient `g`."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x, g):
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            params = dict(self.block.named_parameters())
            for p in params.values():
                if not p.requires_grad:  # a traced graph input in the parameter's place
                    p.requires_grad_(True)
            y = self.block(x)
            grads = torch.autograd.grad(y, [x, *params.values()], g, allow_unused=True)
        out = {"y": y.detach(), "grad_x": grads[0]}
        out.update({f"{GRAD}block.{n}": gr for n, gr in zip(params, grads[1:]) if gr is not None})
        return out


def block_case(single: nn.Module, parallel: Callable[[int, int], nn.Module], x: torch.Tensor, g: torch.Tensor,
               world: int, name: str, dist_inputs=None) -> Case:
    """The case of one block: `single` the single-device block, ``parallel(rank, world)``
    builds rank `rank`'s block from it (after shardproof redraws `single`'s weights). `x`
    and `g` enter as stated by the contract's input relations (the caller's ``relations``)."""
    return Case(single=BlockVJP(single), distributed=lambda rank, w: BlockVJP(parallel(rank, w)),
                inputs={"x": x, "g": g}, world_size=world, dist_inputs=dist_inputs, name=name,
                meta={"source": "block contract: one layer's forward and backward"})
