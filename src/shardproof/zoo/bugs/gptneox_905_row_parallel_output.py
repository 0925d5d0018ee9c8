"""Bug (gpt-neox issue 905): the output (unembedding) layer is built as a *row*-parallel linear
with ``parallel_output=True``, so each rank's logits are a partial sum over its hidden shard of
the full vocabulary -- but they are fed to the vocab-parallel cross-entropy, which expects each
rank to hold complete logits for its own slice of the vocabulary. Expected finding: the first
vocab-parallel step that reads the partial logits (the row max), on every rank."""
import torch
import torch.nn.functional as F
from torch import nn

from shardproof import Case
from vocab_parallel_cross_entropy import VocabParallelCrossEntropy

TOKENS, HIDDEN, VOCAB = 8, 16, 24
WORLD_SIZES = (2, 4)


class OutputLayerLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, h, target):
        return F.cross_entropy(self.out(h), target)


class RowParallelOutputLoss(nn.Module):
    def __init__(self, full: OutputLayerLoss, rank: int, world: int):
        super().__init__()
        self.weight = nn.Parameter(full.out.weight.detach().chunk(world, 1)[rank].clone())
        self.rank, self.world = rank, world
        self.loss = VocabParallelCrossEntropy(rank, world)

    def forward(self, h, target):
        h_local = h.chunk(self.world, dim=-1)[self.rank]
        logits = F.linear(h_local, self.weight)  # BUG: a partial sum over hidden, not a vocab shard
        return self.loss(logits, target)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = OutputLayerLoss()
    return Case(single=full, distributed=lambda rank, world: RowParallelOutputLoss(full, rank, world),
                inputs={"h": torch.randn(TOKENS, HIDDEN), "target": torch.randint(0, VOCAB, (TOKENS,))},
                world_size=world_size, name="gptneox_905_row_parallel_output",
                meta={"source": "gpt-neox issue 905 (row-parallel output layer + vocab-parallel cross-entropy)",
                      "bug_op": "aten.max", "bug_node": "max_1", "bug_ranks": "all", "bug": "nonlinearity-on-partial",
                      "hint": r"all_reduce.*before", "bug_line": "torch.max(logits"})
