"""Causal attention scores with the queries sharded by sequence; each rank builds its causal mask as
`torch.ones(n, S, dtype=torch.bool).tril()`. Bug: tril of the local block, as if the rank's queries
started at position 0."""
import torch

from adv import fn_case

LABEL, CLASS = "bug", "relations"
BUG_OP = "aten.masked_fill"  # where shardproof must find it
S = 8


def single(q, k):
    scores = q @ k.t()
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def distributed(rank, world, q, k):
    n = q.shape[0]
    scores = q @ k.t()
    mask = torch.ones(n, S, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def case(world_size=2):
    return fn_case(single, distributed, {"q": torch.randn(S, 4), "k": torch.randn(S, 4)}, shard={"q": 0},
                   expect="Shard(0)")
