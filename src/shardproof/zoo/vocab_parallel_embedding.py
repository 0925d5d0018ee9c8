"""Megatron VocabParallelEmbedding: rank r holds rows [lo, hi) of the embedding table.

Ids outside the rank's vocabulary range are masked to 0, looked up locally, the looked-up
rows are zeroed, and the partial results are summed across ranks with all_reduce.

    shardproof verify src/shardproof/zoo/vocab_parallel_embedding.py --world-size 4
"""
import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F

from shardproof import Case

VOCAB, DIM = 48, 8
WORLD_SIZES = (2, 3, 4, 6, 8)


class Embedding(nn.Module):
    def __init__(self, vocab=VOCAB, dim=DIM):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, dim))
        nn.init.normal_(self.weight)

    def forward(self, ids):
        return F.embedding(ids, self.weight)


class VocabParallelEmbedding(nn.Module):
    def __init__(self, full: Embedding, rank: int, world: int):
        super().__init__()
        per_rank = VOCAB // world
        self.vocab_start_index = rank * per_rank
        self.vocab_end_index = self.vocab_start_index + per_rank
        self.weight = nn.Parameter(torch.empty(per_rank, DIM))
        with torch.no_grad():
            self.weight.copy_(full.weight[self.vocab_start_index:self.vocab_end_index])

    def forward(self, ids):
        output_parallel = self.local_lookup(ids)
        # Reduce across all the model parallel GPUs.
        dist.all_reduce(output_parallel)
        return output_parallel

    def local_lookup(self, ids):
        """The rank's rows of the lookup (zero for ids outside its vocabulary range)."""
        # Build the mask.
        input_mask = (ids < self.vocab_start_index) | (ids >= self.vocab_end_index)
        # Mask the input.
        masked_input = ids.clone() - self.vocab_start_index
        masked_input[input_mask] = 0
        # Get the embeddings.
        output_parallel = F.embedding(masked_input, self.weight)
        # Mask the output embedding.
        output_parallel[input_mask, :] = 0.0
        return output_parallel


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Embedding()
    ids = torch.randint(0, VOCAB, (4, 6))
    return Case(single=full, distributed=lambda rank, world: VocabParallelEmbedding(full, rank, world),
                inputs={"ids": ids}, world_size=world_size, name="vocab_parallel_embedding",
                meta={"source": "Megatron VocabParallelEmbedding"},
                expect={"out": "Replicate()"})
