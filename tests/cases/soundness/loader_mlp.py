"""Soundness class 5 (issue 14): weight loaders that hand a rank the wrong block.

A Megatron MLP: fc1 column parallel (rank r should hold rows r of fc1's weight and bias),
fc2 row parallel (columns r) with an all_reduce. The loaders under test:

- ``block``: rank r loads block r (correct);
- ``block0``: every rank loads block 0 (bug);
- ``next``: rank r loads block r + 1 (off by one, bug);
- ``transposed``: rank r loads block r of the transposed (square) weight (bug).

``zero_bias``: fc1's bias starts at zero (every block of it looks the same);
``bias_loader``: the loader of fc1's bias (the weight's by default). ``prebuilt``: the
distributed programs are built in ``case()``, holding copies of the weights as they are
then (shardproof's redraw of the single-device weights cannot reach them)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from shardproof import Case

HIDDEN = 8  # fc1 is square, so a transposed block has the right shape
WORLD_SIZES = (2, 4)


class MLP(nn.Module):
    def __init__(self, zero_bias: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(HIDDEN, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        if zero_bias:
            nn.init.zeros_(self.fc1.bias)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def load(tensor: torch.Tensor, loader: str, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s block of `tensor` along dim 0, as the loader `loader` reads it."""
    if loader == "transposed":
        tensor = tensor.t()
    block = {"block": rank, "block0": 0, "next": (rank + 1) % world, "transposed": rank}[loader]
    return tensor.chunk(world, 0)[block].clone()


class ParallelMLP(nn.Module):
    def __init__(self, full: MLP, rank: int, world: int, loader: str, bias_loader: str):
        super().__init__()
        with torch.no_grad():
            self.w1 = nn.Parameter(load(full.fc1.weight, loader, rank, world))
            self.b1 = nn.Parameter(load(full.fc1.bias, bias_loader, rank, world))
            self.w2 = nn.Parameter(full.fc2.weight.chunk(world, 1)[rank].clone())
            self.b2 = nn.Parameter(full.fc2.bias.clone())

    def forward(self, x):
        h = torch.tanh(F.linear(x, self.w1, self.b1))
        y = F.linear(h, self.w2)
        dist.all_reduce(y)
        return y + self.b2


def case(world_size: int = 2, loader: str = "block", bias_loader: str | None = None, zero_bias: bool = False,
         prebuilt: bool = False) -> Case:
    torch.manual_seed(0)
    full = MLP(zero_bias)
    bias_loader = bias_loader or ("block" if loader == "transposed" else loader)

    def build(rank, world):
        return ParallelMLP(full, rank, world, loader, bias_loader)
    distributed = build
    if prebuilt:
        built = {r: build(r, world_size) for r in range(world_size)}
        distributed = lambda rank, world: built[rank]  # noqa: E731
    return Case(single=full, distributed=distributed, inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size,
                name=f"loader_mlp[{loader},{bias_loader}{',zero_bias' if zero_bias else ''}"
                     f"{',prebuilt' if prebuilt else ''}]",
                expect={"out": "Replicate()"})
