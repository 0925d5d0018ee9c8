"""Expert parallelism with static routing: row i of x goes to expert ROUTE[i]; rank r holds rows [4r,
4r + 4) and expert r's scale. Rows travel to their expert's rank by all_to_all_single with per-rank
split sizes, are scaled there, and travel back. Bug: rank 1 uses rank 0's send sizes (consistent
sizes, wrong rows: row 5 reaches expert 1)."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "bug", "collectives"
ROUTE = torch.tensor([0, 1, 1, 1, 0, 0, 1, 1])
SPLITS = {0: ((1, 3), (1, 1)), 1: ((1, 3), (3, 3))}  # rank -> (sizes sent to each rank, sizes received from each rank)


def single(x, scale):
    return x * scale[ROUTE][:, None]


def distributed(rank, world, x, scale):
    send, recv = SPLITS[rank]
    order = ROUTE.chunk(world)[rank].argsort(stable=True)
    inbox = torch.empty(sum(recv), x.shape[1])
    dist.all_to_all_single(inbox, x[order].contiguous(), list(recv), list(send))
    inbox = inbox * scale[0]
    back = torch.empty(x.shape)
    dist.all_to_all_single(back, inbox, list(send), list(recv))
    return torch.empty_like(back).index_copy_(0, order, back)


def case(world_size=2):
    return fn_case(single, distributed, {"x": torch.randn(8, 3), "scale": torch.randn(2)},
                   shard={"x": 0, "scale": 0}, expect="Shard(0)")
