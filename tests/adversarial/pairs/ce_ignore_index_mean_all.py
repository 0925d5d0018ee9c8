"""Vocab-parallel cross-entropy (logits sharded over the vocabulary) with targets that
contain ignore_index (-100). Bug: the mean over every token."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from adv import fn_case

LABEL, CLASS = "bug", "relations"
V = 8


def single(logits, target):
    return F.cross_entropy(logits, target, ignore_index=-100)


def distributed(rank, world, logits, target):
    n = logits.shape[1]
    m = logits.max(-1, keepdim=True).values
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    z = (logits - m).exp().sum(-1)
    dist.all_reduce(z)
    local = target - rank * n
    inside = (local >= 0) & (local < n)
    picked = (logits - m).gather(1, local.clamp(0, n - 1)[:, None]).squeeze(1) * inside
    dist.all_reduce(picked)
    loss = z.log() - picked
    return loss.mean()  # BUG: ignored tokens counted (their loss is logsumexp - 0)


def case(world_size=2):
    target = torch.randint(0, V, (8,))
    target[torch.tensor([1, 4, 5])] = -100
    return fn_case(single, distributed, {"logits": torch.randn(8, V), "target": target}, shard={"logits": 1})
