"""A small DTensor training step for the DTensor training examples: the model is
parallelized with ``parallelize_module`` over the tp dimension of a dp x tp device mesh
(DTensor inserts the tensor-parallel collectives, forward and backward); the step takes the
gradients of the DTensor parameters over the microbatches, sums them over dp (the loss is
normalised by the global token count), clips them by the global norm (each DTensor's square
sum made whole with ``full_tensor``) and applies the optimizer update to the DTensors.
"""
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import parallelize_module

from mini_megatron import all_reduce, masked_sq_error
from shardproof.frontends.torch_train import clip_coefficient, optimizer_update, split_microbatches


def parallelize_for_training(model, world: int, tp: int, plan: dict):
    """`model` (a DTensorTraining module) parallelized by `plan` over tp on a dp x tp mesh."""
    model.mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    return parallelize_module(model, model.mesh["tp"], plan)


def _sum_over(g, group):
    """A gradient summed over a process group (a DTensor's local shard, keeping its layout)."""
    if not isinstance(g, DTensor):
        return all_reduce(g, group)
    return DTensor.from_local(all_reduce(g.to_local(), group), g.device_mesh, g.placements, run_check=False,
                              shape=g.shape, stride=g.stride())


def _square_sum(g):
    s = (g * g).sum()
    return s.full_tensor() if isinstance(s, DTensor) else s


class DTensorTraining:
    """Mixin (before the model class) with the training step of a DTensor-parallelized model."""

    mesh = None  # set by parallelize_for_training

    def reduce_gradients(self, grads, dp):
        """Sum each gradient over the data-parallel ranks (the loss is already normalised)."""
        return {n: _sum_over(g, dp) for n, g in grads.items()}

    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        dp = self.mesh.get_group("dp")
        total_tokens = all_reduce(inputs["mask"].sum(), dp)
        grads, loss = {}, 0
        for mb in split_microbatches(inputs, train.microbatches):
            mb_loss = masked_sq_error(self(x=mb["x"]), mb) / total_tokens
            new = torch.autograd.grad(mb_loss, list(params.values()))
            grads = {n: g if n not in grads else grads[n] + g for n, g in zip(params, new)}
            loss = loss + mb_loss.detach()
        grads = self.reduce_gradients(grads, dp)
        if train.grad_clip is not None:
            coef = clip_coefficient(torch.sqrt(sum(_square_sum(g) for g in grads.values())), train.grad_clip)
            with implicit_replication():
                grads = {n: g * coef for n, g in grads.items()}
        updated = {n: optimizer_update(params[n], grads[n], state[n], train.optimizer) for n in params}
        return {"loss": all_reduce(loss, dp), "grads": grads, "updated": updated}
