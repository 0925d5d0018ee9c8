"""Helpers the adversarial pairs share: a case from two plain functions (the programs
take their tensors as keyword inputs; the distributed one also takes rank and world
first), the rank's block of a tensor, and subgroups built the same way on every rank."""
from __future__ import annotations

import functools

import torch
import torch.distributed as dist

from shardproof import Case


def block(t: torch.Tensor, dim: int, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s block of `t` along `dim` (torch.chunk's blocks)."""
    return t.chunk(world, dim)[rank]


def fn_case(single, distributed, inputs: dict, shard: dict | None = None, expect="Replicate()", world: int = 2,
            name: str = "") -> Case:
    """`single(**inputs)` against `distributed(rank, world, **rank_inputs)`; `shard` maps an
    input to the dim each rank gets its block of (the others are replicated); `expect` is
    the output's relation (a string: the single output ``out``; or a dict by output)."""
    shard = shard or {}

    def rank_inputs(rank, w, values):
        return {k: block(v, shard[k], rank, w) if k in shard else v for k, v in values.items()}
    return Case(single=single, distributed=lambda rank, w: functools.partial(distributed, rank, w),
                inputs=inputs, dist_inputs=rank_inputs if shard else None, world_size=world,
                expect=expect if isinstance(expect, dict) else {"out": expect}, name=name)


def subgroups(*ranks_lists):
    """Every rank creates every group in the same order (c10d requires it); returns them."""
    return [dist.new_group(list(r)) for r in ranks_lists]


def ints(*shape, high: int = 5) -> torch.Tensor:
    """Integer-valued float32 values (sums of them are exact in any order)."""
    return torch.randint(-high, high + 1, shape).float()
