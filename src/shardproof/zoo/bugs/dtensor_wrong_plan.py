"""Bug: a DTensor plan that leaves fc2's output Partial. ``RowwiseParallel(output_layouts=
Partial())`` skips the all_reduce (meant for a later fused reduction that never comes), and
``use_local_output`` hands the forward each rank's partial sum as a plain tensor; the residual
add then adds the replicated x on every rank, so the ranks' outputs neither equal nor sum to the
single-device output. Expected finding: the residual add, on every rank.

(Swapping the styles, {fc1: RowwiseParallel, fc2: ColwiseParallel}, or leaving fc1 or fc2 out of
the plan does not make a silent bug: DTensor's own shape checks reject those programs.)
"""
import copy

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from shardproof import Case
from tp_mlp import HIDDEN, MLP

WORLD_SIZES = (2, 4)


class ResidualMLP(MLP):
    def forward(self, x):
        return x + super().forward(x)


PLAN = {
    "fc1": ColwiseParallel(),
    "fc2": RowwiseParallel(output_layouts=Partial()),  # BUG: should be Replicate() (the default)
}


def parallelize(full: ResidualMLP, rank: int, world: int) -> ResidualMLP:
    model = copy.deepcopy(full)
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(model, mesh, PLAN)


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = ResidualMLP()
    return Case(single=full, distributed=lambda rank, world: parallelize(full, rank, world),
                inputs={"x": torch.randn(4, HIDDEN)}, world_size=world_size, name="dtensor_wrong_plan",
                meta={"source": "PyTorch #179502 class",
                      "bug_op": "aten.add", "bug_node": "add", "bug_ranks": "all", "bug": "partial-sum-never-reduced",
                      "hint": r"all_reduce", "bug_line": "x + super().forward(x)"})
