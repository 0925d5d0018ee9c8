"""Same math (issue 15, form 6): beam expansion with ``repeat_interleave(beams, dim=0)`` of
a batch-sharded (``dim="batch"``) or hidden-sharded (``dim="hidden"``) activation, then a
replicated elementwise op; the single device expands the whole batch.

Buggy twin (``bug=True``): ``repeat(beams, 1, 1)`` (tiling, beams of different sequences
interleaved) instead of ``repeat_interleave``."""
import torch

from shardproof import Case

B, S, H, BEAMS = 8, 3, 8, 3


def single(x, w):
    return {"out": torch.tanh(x.repeat_interleave(BEAMS, dim=0) * w)}


def distributed(rank, world, bug=False):
    def program(x, w):
        y = x.repeat(BEAMS, 1, 1) if bug else x.repeat_interleave(BEAMS, dim=0)
        return {"out": torch.tanh(y * w)}
    return program


def case(world_size: int = 2, bug: bool = False, dim: str = "batch") -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {"x": torch.randn(B, S, H, generator=g), "w": torch.randn(H, generator=g)}
    d = 0 if dim == "batch" else 2

    def shard(rank, world, inputs):
        return {"x": inputs["x"].chunk(world, d)[rank], "w": inputs["w"].chunk(world, 0)[rank] if d == 2 else inputs["w"]}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, bug), inputs=inputs,
                dist_inputs=shard, world_size=world_size,
                name=f"same_math_beam_{dim}" + ("_bug" if bug else ""), expect={"out": f"Shard({d})"})
