"""DTensor tensor-parallel MLP: the tp_mlp model parallelized with ``parallelize_module``
(ColwiseParallel fc1, RowwiseParallel fc2; DTensor inserts the all_reduce itself).

    shardproof verify src/shardproof/zoo/dtensor_mlp.py --world-size 4
"""
import copy

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from shardproof import Case
from tp_mlp import HIDDEN, MLP

WORLD_SIZES = (2, 3, 4, 6, 8)
PLAN = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}


def parallelize(full: MLP, rank: int, world: int) -> MLP:
    model = copy.deepcopy(full)
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(model, mesh, PLAN)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = MLP()
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="dtensor_mlp",
                meta={"source": "DTensor parallelize_module"},
                description="tp_mlp parallelized with DTensor ColwiseParallel/RowwiseParallel",
                expect={"out": "Replicate()"})
