"""Megatron vocab-parallel cross entropy: the logits are sharded along the vocabulary (last) dim.

Each rank holds logits[:, lo:hi]. The global max is found with all_reduce(MAX), the logit of
each target is gathered on the rank that owns it and summed with all_reduce(SUM), and the
softmax denominator is summed with all_reduce(SUM). Single-device: F.cross_entropy.

    shardproof verify src/shardproof/zoo/vocab_parallel_cross_entropy.py --world-size 4
"""
import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F

from shardproof import Case

TOKENS, VOCAB = 8, 48
WORLD_SIZES = (2, 3, 4, 6, 8)


class CrossEntropy(nn.Module):
    def forward(self, logits, target):
        return F.cross_entropy(logits, target)


def vocab_parallel_cross_entropy(logits, target, rank: int, group=None):
    """Megatron's per-token loss of vocab-sharded logits, with what its backward saves:
    ``(loss, exp_logits, sum_exp_logits, target_mask, masked_target_1d)``."""
    # Maximum value along the vocab dim across all ranks.
    logits_max = torch.max(logits, dim=-1)[0]
    dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=group)
    # Subtract the maximum value.
    logits = logits - logits_max.unsqueeze(dim=-1)

    # Get the partition's vocab indices.
    partition_vocab_size = logits.size(-1)
    vocab_start_index = rank * partition_vocab_size
    vocab_end_index = vocab_start_index + partition_vocab_size

    # Create a mask of valid vocab ids (1 means it needs to be masked).
    target_mask = (target < vocab_start_index) | (target >= vocab_end_index)
    masked_target = target.clone() - vocab_start_index
    masked_target[target_mask] = 0

    # Get predicted-logits = logits[target].
    logits_2d = logits.view(-1, partition_vocab_size)
    masked_target_1d = masked_target.view(-1)
    arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
    predicted_logits_1d = logits_2d[arange_1d, masked_target_1d]
    predicted_logits_1d = predicted_logits_1d.clone().contiguous()
    predicted_logits = predicted_logits_1d.view_as(target)
    predicted_logits[target_mask] = 0.0
    # All reduce is needed to get the chunks from other GPUs.
    dist.all_reduce(predicted_logits, group=group)

    # Sum of exponential of logits along vocab dimension across all GPUs.
    exp_logits = torch.exp(logits)
    sum_exp_logits = exp_logits.sum(dim=-1)
    dist.all_reduce(sum_exp_logits, group=group)

    # Loss = log(sum(exp(logits))) - predicted-logit.
    loss = torch.log(sum_exp_logits) - predicted_logits
    return loss, exp_logits, sum_exp_logits, target_mask, masked_target_1d


class VocabParallelCrossEntropy(nn.Module):
    def __init__(self, rank: int, world: int):
        super().__init__()
        self.rank, self.world = rank, world

    def forward(self, logits, target):
        return vocab_parallel_cross_entropy(logits, target, self.rank)[0].mean()


def shard_logits(rank, world, inputs):
    return {"logits": inputs["logits"].chunk(world, dim=-1)[rank], "target": inputs["target"]}


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    logits = torch.randn(TOKENS, VOCAB)
    target = torch.randint(0, VOCAB, (TOKENS,))
    return Case(single=CrossEntropy(), distributed=lambda rank, world: VocabParallelCrossEntropy(rank, world),
                inputs={"logits": logits, "target": target}, dist_inputs=shard_logits,
                world_size=world_size, name="vocab_parallel_cross_entropy",
                meta={"source": "Megatron vocab-parallel CE"},
                expect={"out": "Replicate()"})
