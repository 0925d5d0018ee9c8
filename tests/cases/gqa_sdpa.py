"""Grouped-query attention through torch's sdpa kernel (``enable_gqa=True``: 4 query heads read
2 key/value heads, head h reading h // 2), heads split over 2 ranks: each rank holds its query
heads and the key/value heads they read (correct). ``BUG=kv_swapped``: each rank holds the
other rank's key/value heads."""
import os

import torch
import torch.nn.functional as F

from shardproof import Case

B, HQ, HKV, S, D = 2, 4, 2, 8, 8


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def case(world_size: int = 2) -> Case:
    swapped = os.environ.get("BUG") == "kv_swapped"
    torch.manual_seed(0)
    inputs = {"q": torch.randn(B, HQ, S, D), "k": torch.randn(B, HKV, S, D), "v": torch.randn(B, HKV, S, D)}

    def heads(rank, world, data):
        kv_rank = (world - 1 - rank) if swapped else rank
        return {"q": data["q"].chunk(world, 1)[rank], "k": data["k"].chunk(world, 1)[kv_rank],
                "v": data["v"].chunk(world, 1)[kv_rank]}

    return Case(single=attention, distributed=lambda rank, world: attention, inputs=inputs, dist_inputs=heads,
                world_size=world_size, expect={"out": "Shard(1)"}, name="gqa_sdpa")
