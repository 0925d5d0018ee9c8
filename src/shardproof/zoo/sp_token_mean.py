"""Sequence-parallel loss statistics: activations (batch, seq) sharded along the sequence;
the mean square normalised by the *global* token count (a fill over the whole sequence
extent) and the fraction of positive entries, counted per shard as int64 (a bool cast),
summed across ranks and cast back to float. Exercises constant fills and casts (the
mutation operators ``fill-extent`` and ``cast-dtype`` apply).

    shardproof verify src/shardproof/zoo/sp_token_mean.py --world-size 4
"""
import torch
import torch.distributed as dist

from shardproof import Case

BATCH, SEQ = 3, 8
WORLD_SIZES = (2, 4)


def single(x):
    tokens = (1 - torch.zeros(BATCH, SEQ)).sum()
    positive = (x > 0).long().sum()
    return {"loss": (x ** 2).sum() / tokens, "positive": positive.to(torch.float32) / tokens}


def sequence_parallel(world):
    def program(x):
        squares = (x ** 2).sum()
        dist.all_reduce(squares)
        positive = (x > 0).long().sum()
        dist.all_reduce(positive)
        tokens = (1 - torch.zeros(x.shape[0], x.shape[1] * world)).sum()  # the global extent
        return {"loss": squares / tokens, "positive": positive.to(torch.float32) / tokens}
    return program


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    return Case(single=single, distributed=lambda rank, world: sequence_parallel(world),
                inputs={"x": torch.randn(BATCH, SEQ)},
                dist_inputs=lambda rank, world, inputs: {"x": inputs["x"].chunk(world, 1)[rank]},
                world_size=world_size, name="sp_token_mean", meta={"source": "sequence-parallel loss normalisation"},
                expect={"loss": "Replicate()", "positive": "Replicate()"})
