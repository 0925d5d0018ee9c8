"""DTensor sequence parallelism: LayerNorm -> MLP on a sequence-sharded input.

The input x [batch, seq, hidden] arrives sharded on the sequence dim. SequenceParallel runs
the LayerNorm on the local sequence chunk; ColwiseParallel(input_layouts=Shard(1)) all-gathers
the sequence before fc1; RowwiseParallel(output_layouts=Shard(1)) reduce-scatters fc2's partial
sums back onto the sequence dim, so each rank returns its sequence chunk of the output.

    shardproof verify src/shardproof/zoo/dtensor_sp_mlp.py --world-size 4
"""
import copy

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                               parallelize_module)

from shardproof import Case
from tp_mlp import HIDDEN, MLP

BATCH, SEQ = 2, 24
WORLD_SIZES = (2, 3, 4, 6, 8)


class NormMLP(nn.Module):
    def __init__(self, hidden=HIDDEN):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden)

    def forward(self, x):
        return self.mlp(self.norm(x))


PLAN = {
    "norm": SequenceParallel(),
    "mlp.fc1": ColwiseParallel(input_layouts=Shard(1)),
    "mlp.fc2": RowwiseParallel(output_layouts=Shard(1)),
}


def parallelize(full: NormMLP, rank: int, world: int) -> NormMLP:
    model = copy.deepcopy(full)
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(model, mesh, PLAN)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = NormMLP()
    with torch.no_grad():  # non-trivial affine parameters, so their relations are checked
        full.norm.weight.uniform_(0.5, 1.5)
        full.norm.bias.uniform_(-0.5, 0.5)
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)},
                dist_inputs=lambda rank, world, inputs: {"x": inputs["x"].chunk(world, 1)[rank]},
                expect={"out": "Shard(1)"},
                world_size=world_size, name="dtensor_sp_mlp", meta={"source": "DTensor SequenceParallel"},
                description="sequence-parallel LayerNorm -> MLP with DTensor (SequenceParallel, "
                            "ColwiseParallel(input_layouts=Shard(1)), RowwiseParallel(output_layouts=Shard(1)))")
