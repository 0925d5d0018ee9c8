"""Rank 2 owns x and scatters its row blocks in subgroup {1, 2} with `src=2`; each
member doubles its block and the group all-gathers the result. Correct. Ranks 0 and 3 compute
it whole."""
import torch
import torch.distributed as dist

from adv import fn_case, subgroups

LABEL, CLASS = "ok", "collectives"
WORLD = 4
SRC = 2


def single(x):
    return x * 2


def distributed(rank, world, x):
    (g,) = subgroups([1, 2])
    if rank in (0, 3):
        return x * 2
    data = x if rank == 2 else torch.zeros_like(x)
    mine = torch.empty(x.shape[0] // 2, x.shape[1])
    dist.scatter(mine, list(data.chunk(2)) if rank == SRC else None, src=SRC, group=g)
    out = [torch.empty_like(mine) for _ in range(2)]
    dist.all_gather(out, mine * 2, group=g)
    return torch.cat(out)


def case(world_size=4):
    return fn_case(single, distributed, {"x": torch.randn(4, 3)}, world=world_size)
