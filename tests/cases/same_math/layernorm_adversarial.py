"""Adversarial pairs for the polynomial normal form (algebra/poly.py) on a hand-written LayerNorm
over a hidden-sharded activation (see layernorm_by_hand.py).

``variant``:
- ``local_n`` (buggy): mean and variance divided by the rank's local width instead of the whole
  hidden size -- every term is the right polynomial shape, only a coefficient is wrong.
- ``centered`` (correct, written oddly): the centered variance from an all-reduced sum of
  ``(h - mean)**2``, and ``/ sqrt(var + eps)`` instead of ``* rsqrt(var + eps)``."""
import torch
import torch.distributed as dist

from layernorm_by_hand import EPS, H, T, shard, single  # noqa: F401
from shardproof import Case


def distributed(rank, world, variant):
    def program(h, weight, bias):
        n = h.shape[-1] if variant == "local_n" else H  # BUG (local_n): the local width
        s1 = h.sum(-1, keepdim=True)
        dist.all_reduce(s1)
        mean = s1 / n
        if variant == "local_n":
            s2 = (h * h).sum(-1, keepdim=True)
            dist.all_reduce(s2)
            return {"out": (h - mean) * torch.rsqrt(s2 / n - mean * mean + EPS) * weight + bias}
        c = ((h - mean) ** 2).sum(-1, keepdim=True)
        dist.all_reduce(c)
        return {"out": (h - mean) / torch.sqrt(c / n + EPS) * weight + bias}
    return program


def case(world_size: int = 2, variant: str = "centered") -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {"h": torch.randn(T, H, generator=g), "weight": torch.randn(H, generator=g),
              "bias": torch.randn(H, generator=g)}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, variant), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name=f"layernorm_{variant}", expect={"out": "Shard(1)"})
