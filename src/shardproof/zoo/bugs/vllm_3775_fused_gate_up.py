"""Bug (vLLM issue 3775): the fused ``gate_up_proj`` weight ([gate; up] stacked on dim 0) is
sharded as ONE tensor -- a plain Shard(0) chunk of the fused rows -- instead of per section
(rank r must hold [gate_r; up_r]). With 2 ranks, rank 0 gets all of gate and rank 1 all of
up; each rank then splits its rows into "gate" and "up" halves. Shapes line up, outputs are
silently wrong. The ranks of the second half hold only up rows, so the SiLU they apply to
their "gate" half is SiLU of up rows, a tensor the single-device program never computes.
Expected finding: that SiLU, on the second half of the ranks (the first half go wrong one op
later, at the product, pairing gate rows with gate rows)."""
import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F

from shardproof import Case

HIDDEN, FFN = 16, 32
WORLD_SIZES = (2, 4)


class GatedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_up_proj = nn.Linear(HIDDEN, 2 * FFN, bias=False)
        self.down_proj = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class ParallelGatedMLP(nn.Module):
    def __init__(self, full: GatedMLP, rank: int, world: int):
        super().__init__()
        self.gate_up_proj = nn.Linear(HIDDEN, 2 * FFN // world, bias=False)
        self.down_proj = nn.Linear(FFN // world, HIDDEN, bias=False)
        with torch.no_grad():
            fused = full.gate_up_proj.weight
            # BUG: shards the fused [gate; up] as one tensor; should be
            # torch.cat([s.chunk(world, 0)[rank] for s in fused.chunk(2, 0)])
            self.gate_up_proj.weight.copy_(fused.chunk(world, 0)[rank])
            self.down_proj.weight.copy_(full.down_proj.weight.chunk(world, 1)[rank])

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        y = self.down_proj(F.silu(gate) * up)
        dist.all_reduce(y)
        return y


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = GatedMLP()
    return Case(single=full, distributed=lambda rank, world: ParallelGatedMLP(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="vllm_3775_fused_gate_up",
                meta={"source": "vLLM issue 3775 (gate/up sharded as one tensor)",
                      "bug_op": "aten.silu", "bug_node": "silu",
                      "bug_ranks": list(range(world_size // 2, world_size)), "bug": "wrong-shard-offset",
                      "hint": r"section|shard", "bug_line": "F.silu(gate)"})
