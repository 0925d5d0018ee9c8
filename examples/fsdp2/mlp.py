"""Recipe: one FSDP2 (``torch.distributed.fsdp.fully_shard``) training step of an MLP, data
parallel over every rank: each linear layer and the root are FSDP units, every parameter is
held as its dim-0 shard (FSDP pads uneven shards), all-gathered before use; ``backward()``
reduce-scatters the gradients into ``p.grad``; SGD updates each rank's shard.

    shardproof verify examples/fsdp2/mlp.py --world-size 4     # exit 0: verified

The loss is normalised by the *global* batch size, so FSDP must sum the gradients, not
average them: ``set_gradient_divide_factor(1.0)`` on every FSDP module (it is per module).
``set_force_sum_reduction_for_comms(True)`` lets the step run on gloo too: otherwise FSDP2
reduce-scatters with ``ReduceOp.PREMUL_SUM`` (AVG without a factor), which gloo rejects.

shardproof proves each parameter's gradient and updated value are ``Shard(0)`` of the
single-device ones. ``case(world_size, bug=None)``; ``bug="local_mean"`` divides each rank's
loss by its own batch size: the gradients come out ``world`` times too large.
"""
import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from shardproof import SGD, Case, Train

BATCH, HIDDEN, FFN = 8, 7, 10  # 10 and 7 rows split unevenly over 4 ranks: FSDP pads


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(HIDDEN, FFN)
        self.fc2 = nn.Linear(FFN, HIDDEN)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def squared_error(out, inputs):
    return ((out - inputs["target"]) ** 2).sum()


def mean_squared_error(out, inputs):  # the single-device loss
    return squared_error(out, inputs) / out.numel()


class FSDPStep(MLP):
    bug = None

    def train_step(self, inputs, state, train):
        out = self(inputs["x"])  # this rank's batch shard
        count = out.numel() * (1 if self.bug == "local_mean" else dist.get_world_size())  # BUG: local count
        loss = squared_error(out, inputs) / count
        loss.backward()  # FSDP: reduce_scatter (sum) of each gradient into p.grad
        params = {n: p.to_local() for n, p in self.named_parameters()}
        grads = {n: p.grad.to_local() for n, p in self.named_parameters()}
        updated = {n: params[n] - train.optimizer.lr * grads[n] for n in params}
        total = loss.detach().clone()
        dist.all_reduce(total)
        return {"loss": total, "grads": grads, "updated": updated}


def shard(full: MLP, world: int, bug=None) -> FSDPStep:
    model = FSDPStep()
    model.load_state_dict(copy.deepcopy(full.state_dict()))
    model.bug = bug
    mesh = init_device_mesh("cpu", (world,))
    for unit in (model.fc1, model.fc2, model):
        fully_shard(unit, mesh=mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # sum: the loss is already divided globally
            module.set_force_sum_reduction_for_comms(True)  # ReduceOp.SUM only (gloo has no PREMUL_SUM)
    return model


def batch_shard(rank, world, inputs):
    return {k: v.chunk(world, 0)[rank] for k, v in inputs.items()}


def case(world_size: int = 2, bug=None) -> Case:
    torch.manual_seed(0)
    full = MLP()
    return Case(single=full, distributed=lambda rank, world: shard(full, world, bug),
                inputs={"x": torch.randn(BATCH, HIDDEN), "target": torch.randn(BATCH, HIDDEN)},
                dist_inputs=batch_shard, world_size=world_size,
                train=Train(loss=mean_squared_error, optimizer=SGD(lr=0.1)))
