"""Sequence-parallel cross-entropy with ignore_index: each rank's mean, averaged over ranks
(wrong when the ranks hold different numbers of valid tokens)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from adv import fn_case

LABEL, CLASS = "bug", "relations"


def single(logits, target):
    return F.cross_entropy(logits, target, ignore_index=-100)


def distributed(rank, world, logits, target):
    loss = F.cross_entropy(logits, target, ignore_index=-100)
    dist.all_reduce(loss)
    return loss / world  # BUG: 1 valid token on rank 0, 4 on rank 1


def case(world_size=2):
    target = torch.randint(0, 6, (8,))
    target[torch.tensor([0, 1, 2, 5])] = -100
    return fn_case(single, distributed, {"logits": torch.randn(8, 6), "target": target},
                   shard={"logits": 0, "target": 0})
