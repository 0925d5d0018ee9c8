"""An uneven all-gather by padding: rank 0 holds 2 rows, rank 1 holds 3; rank 0 pads to 3, both all-
gather, and the padding is removed with `g[:5]`. Bug: the first 5 rows keep rank 0's padding row and
drop rank 1's last row."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "collectives"
SIZES = (2, 3)


def single(x):
    return x * 3


def distributed(rank, world, x):
    lo = sum(SIZES[:rank])
    mine = x[lo:lo + SIZES[rank]] * 3
    padded = torch.cat([mine, torch.zeros(max(SIZES) - mine.shape[0], x.shape[1])])
    g = torch.empty(max(SIZES) * world, x.shape[1])
    dist.all_gather_into_tensor(g, padded)
    return g[:5]


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(5, 2)})
