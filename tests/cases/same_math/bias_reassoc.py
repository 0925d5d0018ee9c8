"""Same math (issue 15, form 1): a row-parallel projection on 3-D activations whose bias is
added *after* the all_reduce of a viewed partial product and after the residual,
``(x + all_reduce(mm(h, W_r.T)).view(b, s, n)) + bias``, against the single-device
``x + addmm(bias, h, W.T).view(b, s, n)`` (reassociation of a bias across a reduced product).

Buggy twin (``bug=True``): the bias is added on every rank before the all_reduce, so it is
summed world-size times (wrong scale)."""
import torch
import torch.distributed as dist

from shardproof import Case

B, S, K, N = 2, 4, 8, 6


def single(x, h, w, bias):
    return {"out": x + torch.addmm(bias, h.reshape(-1, K), w.t()).view(B, S, N)}


def distributed(rank, world, bug=False):
    def program(x, h, w, bias):
        y = torch.mm(h.reshape(-1, h.shape[-1]), w.t())
        if bug:
            y = y + bias  # BUG: the replicated bias goes into the sum of every rank
        dist.all_reduce(y)
        out = x + y.view(B, S, N)
        return {"out": out if bug else out + bias}
    return program


def shard(rank, world, inputs):
    k = K // world
    return dict(inputs, h=inputs["h"][..., rank * k:(rank + 1) * k], w=inputs["w"][:, rank * k:(rank + 1) * k])


def case(world_size: int = 2, bug: bool = False) -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {"x": torch.randn(B, S, N, generator=g), "h": torch.randn(B, S, K, generator=g),
              "w": torch.randn(N, K, generator=g), "bias": torch.randn(N, generator=g)}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, bug), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name="same_math_bias" + ("_bug" if bug else ""),
                expect={"out": "Replicate()"})
