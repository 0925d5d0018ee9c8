"""Zero padding where the ranks do not divide a dim (issue 15): the hidden dim of an MLP
(FFN = 5 features) is padded with zero features to a multiple of the world size; rank r
holds block r of the padded fc1 (rows) and fc2 (columns). Variants of what follows fc1:

- ``mlp``: fc2 row parallel and an all_reduce: the padding multiplies zero rows (correct);
- ``norm``: the hidden features all-gathered, then a LayerNorm over them, padding included
  (bug: the mean and variance count the zeros);
- ``norm_sliced``: the same with the padding sliced away first (correct);
- ``softmax``: a softmax over the gathered features, padding included (bug);
- ``softmax_sliced``: the padding sliced away first (correct)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from shardproof import Case

HIDDEN, FFN = 8, 5
WORLD_SIZES = (4,)


def padded(world: int) -> int:
    return -(-FFN // world) * world


class MLP(nn.Module):
    def __init__(self, variant: str):
        super().__init__()
        self.variant = variant
        self.fc1 = nn.Linear(HIDDEN, FFN)
        self.fc2 = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if self.variant.startswith("norm"):
            return F.layer_norm(h, (FFN,))
        if self.variant.startswith("softmax"):
            return torch.softmax(h, -1)
        return self.fc2(h)


class PaddedMLP(nn.Module):
    def __init__(self, full: MLP, rank: int, world: int):
        super().__init__()
        self.variant, self.world = full.variant, world
        size = padded(world)
        with torch.no_grad():
            w1 = F.pad(full.fc1.weight, (0, 0, 0, size - FFN)).chunk(world, 0)[rank]
            b1 = F.pad(full.fc1.bias, (0, size - FFN)).chunk(world, 0)[rank]
            w2 = F.pad(full.fc2.weight, (0, size - FFN)).chunk(world, 1)[rank]
        self.fc1 = nn.Linear(HIDDEN, size // world)
        self.fc2 = nn.Linear(size // world, HIDDEN, bias=False)
        with torch.no_grad():
            self.fc1.weight.copy_(w1)
            self.fc1.bias.copy_(b1)
            self.fc2.weight.copy_(w2)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if self.variant == "mlp":
            y = self.fc2(h)
            dist.all_reduce(y)
            return y
        parts = [torch.empty_like(h) for _ in range(self.world)]
        dist.all_gather(parts, h)
        h = torch.cat(parts, -1)
        if self.variant.endswith("_sliced"):
            h = h[..., :FFN]
        if self.variant.startswith("norm"):
            return F.layer_norm(h, (h.shape[-1],))
        return torch.softmax(h, -1)


def relations(world: int) -> dict:
    pad = f"[[{FFN}, {padded(world)}]]"
    return {"fc1.weight": f"Padded(Shard(0), 0, {pad})", "fc1.bias": f"Padded(Shard(0), 0, {pad})",
            "fc2.weight": f"Padded(Shard(1), 1, {pad})"}


def case(world_size: int = 2, variant: str = "mlp") -> Case:
    torch.manual_seed(0)
    full = MLP(variant)
    return Case(single=full, distributed=lambda rank, world: PaddedMLP(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name=f"padded_mlp[{variant}]",
                relations=relations(world_size), expect={"out": "Replicate()"})
