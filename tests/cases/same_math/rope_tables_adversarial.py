"""Adversarial pairs for the input-independent tables of engine/tables.py (issue 15, form 4).

``variant``:
- ``reversed`` (buggy): rank r builds its positions and causal mask from the offset of rank
  ``world - 1 - r``. Every rank's table is an exact block of the single-device table, only the
  wrong one for the queries it holds; it must not verify.
- ``odd`` (correct): the positions are a row of ``arange(world * s).view(world, s)`` and the
  causal mask is written as a comparison of absolute positions instead of ``tril``; it must
  still be proved."""
import torch

from rope_positions import B, D, SEQ, attend, rope_table, rotate, single, shard  # noqa: F401
from shardproof import Case


def distributed(rank, world, variant):
    def program(q, k, v):
        s, keys = q.shape[1], k.shape[1]
        kcos, ksin = rope_table(torch.arange(keys))
        if variant == "reversed":
            off = (world - 1 - rank) * s  # BUG: another rank's offset
            pos = off + torch.arange(s)
            keep = torch.tril(torch.ones(s, keys), diagonal=off)
        else:
            pos = torch.arange(world * s).view(world, s)[rank]
            keep = (pos[:, None] >= torch.arange(keys)[None, :]).float()
        cos, sin = rope_table(pos)
        return {"out": attend(rotate(q, cos, sin), rotate(k, kcos, ksin), v, keep)}
    return program


def case(world_size: int = 2, variant: str = "odd") -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(B, SEQ, D, generator=g) for n in ("q", "k", "v")}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, variant), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name=f"rope_tables_{variant}", expect={"out": "Shard(1)"})
