"""Tensor- to batch-parallel with all_to_all_single; the receive buffer is
`torch.empty_like(y.t().contiguous()).t()`. Bug: a non-contiguous (transposed) buffer, which gloo
fills as if it were contiguous."""
import torch
import torch.distributed as dist

from adv import block, fn_case

LABEL, CLASS = "bug", "collectives"


def single(x, w):
    return x @ w


def distributed(rank, world, x, w):
    y = x @ w  # (batch, features / world): this rank's feature block for the whole batch
    recv = torch.empty_like(y.t().contiguous()).t()
    dist.all_to_all_single(recv, y.contiguous())  # block j: rank j's features for my batch rows
    return torch.cat(recv.contiguous().chunk(world, 0), 1)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 6), "w": torch.randn(6, 8)}, shard={"w": 1},
                   expect="Shard(0)")
