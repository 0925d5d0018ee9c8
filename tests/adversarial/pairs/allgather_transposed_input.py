"""all_gather_into_tensor of a transposed (dense, non-contiguous) input: the ranks' blocks
are gathered as the input's values, whatever its strides."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "collectives"


def single(x):
    return x.t()


def distributed(rank, world, x):
    xt = x.t()  # (cols, rows / world), not contiguous
    out = torch.empty(world * xt.shape[0], xt.shape[1])
    dist.all_gather_into_tensor(out, xt)
    return torch.cat(out.chunk(world, 0), 1)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 3)}, shard={"x": 0})
