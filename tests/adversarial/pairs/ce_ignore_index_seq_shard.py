"""Sequence-parallel cross-entropy with ignore_index: each rank sums its tokens' losses and
counts its valid ones; both all-reduced (correct, though the ranks' valid counts differ)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from adv import fn_case

LABEL, CLASS = "ok", "relations"


def single(logits, target):
    return F.cross_entropy(logits, target, ignore_index=-100)


def distributed(rank, world, logits, target):
    s = F.cross_entropy(logits, target, ignore_index=-100, reduction="sum")
    n = (target != -100).sum().float()
    both = torch.stack([s, n])
    dist.all_reduce(both)
    return both[0] / both[1]


def case(world_size=2):
    target = torch.randint(0, 6, (8,))
    target[torch.tensor([0, 1, 2, 5])] = -100
    return fn_case(single, distributed, {"logits": torch.randn(8, 6), "target": target},
                   shard={"logits": 0, "target": 0})
