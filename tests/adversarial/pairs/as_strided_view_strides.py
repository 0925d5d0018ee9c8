"""Row shards all-gathered, then a 2x3 window of the transpose read with `xt.as_strided((2, 3), (1, 6),
1) * 1.0`. Trap: as_strided with the storage's own strides and offset (correct)."""
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
    return xt.as_strided((2, 3), (1, 6), 1) * 1.0


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(4, 6)}, shard={"x": 0})
