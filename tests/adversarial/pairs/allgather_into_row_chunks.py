"""Trap: all_gather into the row chunks of one output buffer (contiguous views)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "collectives"


def single(x):
    return x.tanh()


def distributed(rank, world, x):
    out = torch.empty(x.shape[0] * world, x.shape[1])
    dist.all_gather(list(out.chunk(world, 0)), x.tanh())
    return out


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(6, 3)}, shard={"x": 0})
