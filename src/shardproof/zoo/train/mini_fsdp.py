"""A small torchtitan-style FSDP2 trainer for the training examples: ``fully_shard`` on
each unit and at the root, data parallel over every rank, the loss normalised by the global
token count (so FSDP must sum the gradients, not average them), microbatches accumulating
into ``.grad``, then the optimizer update of each rank's shard.

Each piece is a method, so that the bug examples can override exactly one.
"""
import os
import sys

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the zoo models

from mini_megatron import all_reduce, masked_sq_error  # noqa: E402
from shardproof.frontends.torch_train import optimizer_update, split_microbatches  # noqa: E402


class FSDPTraining:
    """Mixin for a module (placed before its class): ``shard(units, world)`` applies FSDP2
    to each unit and the root; ``train_step`` is the training step."""

    def shard(self, units, world: int):
        mesh = init_device_mesh("cpu", (world,))
        for unit in units:
            fully_shard(unit, mesh=mesh)
        fully_shard(self, mesh=mesh)
        self.sum_gradients()

    def sum_gradients(self):
        """The loss is already divided by the global token count: FSDP must not average too.
        The setting is per FSDP module (not recursive), so it goes on every one."""
        for module in self.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)

    def train_step(self, inputs, state, train):
        global_tokens = all_reduce(inputs["mask"].sum(), dist.group.WORLD)
        loss = 0
        for mb in split_microbatches(inputs, train.microbatches):
            mb_loss = masked_sq_error(self(mb["x"]), mb) / global_tokens
            mb_loss.backward()  # FSDP reduce-scatters the gradient, accumulating into .grad
            loss = loss + mb_loss.detach()
        params = {n: p.to_local() for n, p in self.named_parameters()}
        grads = {n: p.grad.to_local() for n, p in self.named_parameters()}
        updated = {n: optimizer_update(params[n], grads[n], state[n], train.optimizer) for n in params}
        return {"loss": all_reduce(loss, dist.group.WORLD), "grads": grads, "updated": updated}


def data_shard(rank, world, inputs):
    """``dist_inputs``: rank r takes the r-th chunk of the batch."""
    return {k: v.chunk(world, 0)[rank] for k, v in inputs.items()}
