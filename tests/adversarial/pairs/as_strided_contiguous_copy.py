"""Row shards all-gathered, then a 2x3 window of the transpose read with
`xt.contiguous().as_strided((2, 3), (4, 1), 4) * 1.0`. Trap: on a contiguous copy of the transpose
the same call is correct."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "confirm"


def single(x):
    return x.t()[1:3, 0:3] * 1.0


def distributed(rank, world, x):
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x)
    xt = torch.cat(parts).t()
    return xt.contiguous().as_strided((2, 3), (4, 1), 4) * 1.0


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 6)}, shard={"x": 0})
