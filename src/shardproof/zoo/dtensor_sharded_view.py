"""DTensor ``view`` of a Shard(1) tensor that needs redistribution (PyTorch issue 179502):
``x: DTensor[12, 8]`` sharded on dim 1, ``x.view(-1, 6).full_tensor()``. The view merges the
sharded dim into the rows, so the result cannot stay sharded without moving data; the torch
this project pins redistributes (all-gathers the columns, then views), so the program must
verify. bugs/pytorch_179502_sharded_view writes out what the buggy sharding propagation did.

    shardproof verify src/shardproof/zoo/dtensor_sharded_view.py --world-size 4
"""
import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

from shardproof import Case

ROWS, COLS, VIEW_COLS = 12, 8, 6
WORLD_SIZES = (2, 4)


class View(nn.Module):
    def forward(self, x):
        return x.view(-1, VIEW_COLS)


class ShardedView(nn.Module):
    def __init__(self, world: int):
        super().__init__()
        self.mesh = init_device_mesh("cpu", (world,))

    def forward(self, x):
        return DTensor.from_local(x, self.mesh, [Shard(1)]).view(-1, VIEW_COLS).full_tensor()


def shard_columns(rank, world, inputs):
    return {"x": inputs["x"].chunk(world, dim=1)[rank].contiguous()}


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    return Case(single=View(), distributed=lambda rank, world: ShardedView(world),
                inputs={"x": torch.randn(ROWS, COLS)}, dist_inputs=shard_columns, world_size=world_size,
                name="dtensor_sharded_view", meta={"source": "PyTorch issue 179502 (the fixed behaviour)"},
                expect={"out": "Replicate()"})
