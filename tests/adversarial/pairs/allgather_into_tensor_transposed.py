"""all_gather_into_tensor into a transposed (non-contiguous) output buffer."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "collectives"


def single(x):
    return x.tanh()


def distributed(rank, world, x):
    out = torch.empty(x.shape[1], x.shape[0] * world).t()  # BUG: strides of a transpose
    dist.all_gather_into_tensor(out, x.tanh())
    return out


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(3, 4)}, shard={"x": 0})
