"""Soundness class 7 (issue 14): cross-entropy with ``ignore_index=-100`` targets.

Single device: ``F.cross_entropy(logits, target)`` (mean over the targets that are not
-100). Two distributed forms, each with a correct and a buggy variant:

- ``vocab`` (logits sharded along the vocabulary, Megatron's vocab-parallel cross-entropy,
  targets replicated): ``mishandled`` takes the mean of Megatron's per-token loss over every
  token (an ignored token's loss is its log-sum-exp); ``masked`` zeroes ignored tokens and
  divides by the count of the others (correct).
- ``tokens`` (tokens sharded across ranks, each rank has whole logits rows): ``mean_of_means``
  averages the ranks' local means (wrong when the ranks keep different counts);
  ``global_count`` all-reduces the loss sum and the count (correct).

``ignored``: where the -100 targets are: ``middle`` (token 3), ``boundary`` (the last token
of rank 0's shard and the first two of rank 1's), ``none``."""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from shardproof import Case
from vocab_parallel_cross_entropy import vocab_parallel_cross_entropy

TOKENS, VOCAB = 8, 16
WORLD_SIZES = (2, 4)


class CrossEntropy(nn.Module):
    def forward(self, logits, target):
        return F.cross_entropy(logits, target)


class VocabParallel(nn.Module):
    def __init__(self, rank: int, masked: bool):
        super().__init__()
        self.rank, self.masked = rank, masked

    def forward(self, logits, target):
        loss = vocab_parallel_cross_entropy(logits, target, self.rank)[0]
        if not self.masked:
            return loss.mean()  # BUG (mishandled): ignored tokens counted, with loss logsumexp
        keep = target != -100
        return torch.where(keep, loss, torch.zeros_like(loss)).sum() / keep.sum()


class TokenParallel(nn.Module):
    def __init__(self, world: int, global_count: bool):
        super().__init__()
        self.world, self.global_count = world, global_count

    def forward(self, logits, target):
        if not self.global_count:
            loss = F.cross_entropy(logits, target)
            dist.all_reduce(loss)
            return loss / self.world  # BUG (mean_of_means): the ranks' counts differ
        total = F.cross_entropy(logits, target, reduction="sum")
        count = (target != -100).sum().to(total.dtype)
        dist.all_reduce(total)
        dist.all_reduce(count)
        return total / count


def targets(ignored: str, world: int) -> torch.Tensor:
    target = torch.randint(0, VOCAB, (TOKENS,))
    if ignored == "middle":
        target[3] = -100
    elif ignored == "boundary":
        edge = TOKENS // world  # rank 0's last token, rank 1's first two: the ranks keep different counts
        target[edge - 1] = target[edge] = target[edge + 1] = -100
    return target


def case(world_size: int = 2, form: str = "vocab", variant: str = "masked", ignored: str = "middle") -> Case:
    torch.manual_seed(0)
    inputs = {"logits": torch.randn(TOKENS, VOCAB), "target": targets(ignored, world_size)}
    if form == "vocab":
        def split(rank, world, data):
            return {"logits": data["logits"].chunk(world, -1)[rank], "target": data["target"]}
        make = lambda rank, world: VocabParallel(rank, variant == "masked")  # noqa: E731
    else:
        def split(rank, world, data):
            return {k: v.chunk(world, 0)[rank] for k, v in data.items()}
        make = lambda rank, world: TokenParallel(world, variant == "global_count")  # noqa: E731
    return Case(single=CrossEntropy(), distributed=make, inputs=inputs, dist_inputs=split, world_size=world_size,
                name=f"ignore_index_ce[{form},{variant},{ignored}]", expect={"out": "Replicate()"})
