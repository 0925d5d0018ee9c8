"""Row-parallel partial sums on ranks 1 and 2 reduced in subgroup {1, 2} to global rank 2 (group rank
1), then broadcast back from it, written as `dst=1`. Bug: dst is global: the sum lands on rank 1 and
rank 2 broadcasts its partial. Ranks 0 and 3 compute the product whole."""
import torch
import torch.distributed as dist

from adv import block, fn_case, subgroups

LABEL, CLASS = "bug", "collectives"
WORLD = 4


def single(x, w):
    return x @ w


def distributed(rank, world, x, w):
    (g,) = subgroups([1, 2])
    if rank in (0, 3):
        return x @ w
    i = rank - 1
    t = block(x, 1, i, 2) @ block(w, 0, i, 2)
    dist.reduce(t, dst=1, group=g)
    dist.broadcast(t, src=2, group=g)
    return t


def case(world_size=4):
    return fn_case(single, distributed, {"x": torch.randn(4, 8), "w": torch.randn(8, 5)}, world=world_size)
