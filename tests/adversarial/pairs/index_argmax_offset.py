"""Trap: vocab-parallel argmax: local max and argmax, the argmax shifted by the rank's
offset, the winner picked from the all-gathered candidates."""
import torch
import torch.distributed as dist

from adv import fn_case

LABEL, CLASS = "ok", "relations"


def single(logits):
    return logits.argmax(-1)


def distributed(rank, world, logits):
    m, i = logits.max(-1)
    i = i + rank * logits.shape[-1]
    ms, ids = [torch.empty_like(m) for _ in range(world)], [torch.empty_like(i) for _ in range(world)]
    dist.all_gather(ms, m)
    dist.all_gather(ids, i)
    best = torch.stack(ms, -1).argmax(-1, keepdim=True)
    return torch.stack(ids, -1).gather(-1, best).squeeze(-1)


def case(world_size=2):
    return fn_case(single, distributed, {"logits": torch.randn(5, 8)}, shard={"logits": 1})
