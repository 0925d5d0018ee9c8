"""Same math (issue 15, form 4): RoPE tables and a causal mask built from rank offsets on a
sequence shard. Each rank holds queries of positions ``rank*s + arange(s)`` (dim 1 of
``[b, seq, d]``) and all keys; it builds its rotation table from those positions and its
causal mask as ``tril(ones(s, S), diagonal=rank*s)``. The single device builds both from
``arange(S)`` and ``tril(ones(S, S))``. Input-independent subgraphs: the tables and masks
of rank r are the rows of the single-device ones.

Buggy twin (``bug=True``): an off-by-one offset, positions ``rank*s + 1 + arange(s)`` on
ranks above 0 and ``diagonal=rank*s - 1``."""
import torch

from shardproof import Case

B, SEQ, D = 2, 8, 4


def rope_table(pos):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    angles = torch.outer(pos.float(), inv_freq)
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def rotate(x, cos, sin):
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def attend(q, k, v, keep):
    scores = (q @ k.transpose(-1, -2)).masked_fill(keep == 0, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def single(q, k, v):
    cos, sin = rope_table(torch.arange(SEQ))
    keep = torch.tril(torch.ones(SEQ, SEQ))
    return {"out": attend(rotate(q, cos, sin), rotate(k, cos, sin), v, keep)}


def distributed(rank, world, bug=False):
    def program(q, k, v):
        s = q.shape[1]
        off = rank * s + (1 if bug and rank else 0)  # BUG (bug=True): off by one on ranks > 0
        cos, sin = rope_table(off + torch.arange(s))
        kcos, ksin = rope_table(torch.arange(k.shape[1]))
        keep = torch.tril(torch.ones(s, k.shape[1]), diagonal=rank * s - (1 if bug else 0))
        return {"out": attend(rotate(q, cos, sin), rotate(k, kcos, ksin), v, keep)}
    return program


def shard(rank, world, inputs):
    return dict(inputs, q=inputs["q"].chunk(world, 1)[rank])


def case(world_size: int = 2, bug: bool = False) -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(B, SEQ, D, generator=g) for n in ("q", "k", "v")}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, bug), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name="same_math_rope" + ("_bug" if bug else ""),
                expect={"out": "Shard(1)"})
