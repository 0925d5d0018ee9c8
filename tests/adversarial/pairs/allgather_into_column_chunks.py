"""all_gather into the column chunks of one buffer (non-contiguous views)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "collectives"


def single(x):
    return x.tanh()


def distributed(rank, world, x):
    out = torch.empty(x.shape[0], x.shape[1] * world)
    dist.all_gather(list(out.chunk(world, 1)), x.tanh())
    return out


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 4)}, shard={"x": 1})
