"""Bug: a column-parallel fc1 with gather_output=True (Megatron ColumnParallelLinear feeding a
replicated fc2) gathers its [tokens, ffn/N] output with all_gather_into_tensor, which stacks
the shards along dim 0 ([N*tokens, ffn/N]); the gathered buffer is then reinterpreted with
.view(tokens, ffn) as if it were concatenated along the last dim, instead of Megatron's
torch.cat(output.chunk(N, dim=0), dim=-1). Tokens and features get scrambled on every rank.
Expected finding: the all_gather itself, on every rank: it concatenates along dim 0 shards
that are split along the last dim (class wrong-dim), so no later view can mean the
single-device tensor."""
import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F

from shardproof import Case
from tp_mlp import FFN, HIDDEN, MLP

WORLD_SIZES = (2, 4)


def gather_along_last_dim(x, world):
    dim_size = list(x.size())
    dim_size[0] = dim_size[0] * world
    output = torch.empty(dim_size, dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(output, x.contiguous())
    # BUG: the gathered shards are stacked along dim 0; this should be
    #   torch.cat(output.chunk(world, dim=0), dim=-1)
    return output.view(x.size(0), -1)


class GatherOutputMLP(nn.Module):
    """fc1 column parallel with its output all-gathered; fc2 replicated."""

    def __init__(self, full: MLP, rank: int, world: int):
        super().__init__()
        self.world = world
        self.fc1 = nn.Linear(HIDDEN, FFN // world)
        self.fc2 = nn.Linear(FFN, HIDDEN)
        with torch.no_grad():
            self.fc1.weight.copy_(full.fc1.weight.chunk(world, 0)[rank])
            self.fc1.bias.copy_(full.fc1.bias.chunk(world, 0)[rank])
            self.fc2.weight.copy_(full.fc2.weight)
            self.fc2.bias.copy_(full.fc2.bias)

    def forward(self, x):
        h = gather_along_last_dim(self.fc1(x), self.world)
        return self.fc2(F.gelu(h))


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = MLP()
    return Case(single=full, distributed=lambda rank, world: GatherOutputMLP(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="allgather_wrong_dim",
                meta={"source": "VERDICT: wrong collective",
                      "bug_op": "_c10d_functional.all_gather_into_tensor", "bug_node": "all_gather_into_tensor",
                      "bug_ranks": "all",
                      "bug": "wrong-dim",
                      "hint": r"dim", "bug_line": "dist.all_gather_into_tensor(output"})
